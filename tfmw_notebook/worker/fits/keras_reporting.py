"""The Keras callback of the live dashboard (reporting.py publishes what it emits).

The callback's logic: keras_callbacks.py puts it on the Callback class of the model's Keras
(tf-keras or Keras 3; both may train on one worker).
"""

from __future__ import annotations

import numbers
from typing import Any

from ...protocol.events import BATCH, EPOCH, EVALUATE, FIT, TRAIN_BEGIN, TRAIN_END, metric_values
from ..corrections.keras_flavour import keras_package
from ..liveness.reporting import EventPublisher
from .callback_logic import CallbackLogic


def _keras_running_means(model) -> bool:
    # Keras' own train_step logs each metric's mean since the epoch began; a
    # train_step of the user's may log anything.
    return type(model).train_step is keras_package(model).Model.train_step


class KerasReportingCallback(CallbackLogic):
    """Reports a fit or an evaluate through `publisher` as train_begin / batch /
    epoch / train_end events (mode "fit" or "evaluate").

    Keras hands it the step's logs as tensors (`_supports_tf_logs`), and only the
    batches the publisher will send (`batch_due`, at most every 0.25 s, and each
    epoch's last) are turned into numbers: converting every batch would make each
    step wait for the device (a host sync that stalls a GPU's step pipeline).
    Epoch events are exact.

    `samples_per_step`: samples this worker consumes per step (under
    MultiWorkerMirroredStrategy, the global batch size / number of workers); when
    given, epoch events carry "samples" so the summary can show samples/s.
    """

    def __init__(self, publisher: EventPublisher, *, samples_per_step: int | None = None):
        super().__init__()
        self._supports_tf_logs = True   # batch logs stay tensors unless sent
        self.publisher = publisher
        self.samples_per_step = _checked_samples_per_step(samples_per_step)
        self._in_fit = False        # fit runs on_test_* for validation; those are not ours
        self._epoch = 0
        self._steps_this_epoch = 0

    def _begin(self, mode: str) -> None:
        params = self.params or {}
        self.publisher.emit(TRAIN_BEGIN, mode=mode, epochs=params.get("epochs"),
                            steps=params.get("steps"),
                            running_means=_keras_running_means(self.model))

    def on_train_begin(self, logs=None):
        self._in_fit = True
        self._begin(FIT)

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch, self._steps_this_epoch = epoch, 0

    def on_train_batch_end(self, batch, logs=None):
        self._steps_this_epoch = batch + 1
        self._send_batch(self._epoch, batch, logs)

    def _send_batch(self, epoch, batch, logs) -> None:
        # An epoch's last batch is always sent, so its curve reaches the epoch's
        # value; Keras waits for the device at each epoch's end anyway.
        last = (self.params or {}).get("steps") == batch + 1
        if last or self.publisher.batch_due():
            self.publisher.emit(BATCH, epoch=epoch, step=batch, logs=metric_values(logs))

    def on_epoch_end(self, epoch, logs=None):
        event = {"epoch": epoch, "logs": metric_values(logs),
                 "steps": self._steps_this_epoch}
        if self.samples_per_step:
            event["samples"] = self._steps_this_epoch * self.samples_per_step
        self.publisher.emit(EPOCH, **event)

    def on_train_end(self, logs=None):
        self._in_fit = False
        self.publisher.emit(TRAIN_END)

    def on_test_begin(self, logs=None):
        if not self._in_fit:
            self._begin(EVALUATE)

    def on_test_batch_end(self, batch, logs=None):
        if not self._in_fit:
            self._send_batch(0, batch, logs)

    def on_test_end(self, logs=None):
        if not self._in_fit:
            self.publisher.emit(TRAIN_END, logs=metric_values(logs))


def _checked_samples_per_step(samples_per_step: Any) -> int | None:
    if samples_per_step is None:
        return None
    if (isinstance(samples_per_step, bool) or not isinstance(samples_per_step, numbers.Integral)
            or samples_per_step < 1):
        raise ValueError(
            "Invalid value for argument `samples_per_step`. "
            f"Received: samples_per_step={samples_per_step!r}. Expected a positive integer or None."
        )
    return int(samples_per_step)
