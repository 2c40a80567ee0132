"""Worker side of the live dashboard: buffer training events and publish them.

Transport: on an engine, `publish` is `ipyparallel.datapub.publish_data`. The client
*merges* every published dict into one dict per engine (dict.update), so a key that
is published twice keeps only its last value. Each flush therefore goes out under a
fresh key, ``"tfmw-events-<seq>"`` with seq = 1, 2, 3, ..., holding a list of events;
`new_events` on the client takes the keys it has not read yet, in order.

TensorFlow is imported only inside `make_keras_callback`, never when this module loads.
"""

from __future__ import annotations

import functools
import re
import time
from typing import Any, Callable, Mapping

from ..metrics import plain_floats

EVENTS_KEY_PREFIX = "tfmw-events-"
_EVENTS_KEY = re.compile(re.escape(EVENTS_KEY_PREFIX) + r"(\d+)\Z")
# These mark a change the notebook should show at once; batch events can wait a little.
_URGENT_KINDS = frozenset({"train_begin", "epoch", "train_end", "report"})


def events_key(seq: int) -> str:
    return f"{EVENTS_KEY_PREFIX}{seq}"


def new_events(data: Mapping[str, Any] | None, last_seq: int = 0) -> tuple[list[dict], int]:
    """Events in one engine's published data that come after `last_seq`, in order.

    Returns (events, the highest seq read); pass that seq back in on the next poll.
    Keys that are not ours (a user's own publish_data) are left alone.
    """
    fresh = []
    for key in list(data or {}):  # a snapshot: the client fills `data` from another thread
        match = _EVENTS_KEY.match(key) if isinstance(key, str) else None
        if match and int(match.group(1)) > last_seq:
            fresh.append(int(match.group(1)))
    events: list[dict] = []
    for seq in sorted(fresh):
        events.extend(data[events_key(seq)])
    return events, max(fresh, default=last_seq)


class EventPublisher:
    """Sends events through `publish(dict)`; batches are sent together, at most every
    `min_interval` seconds, anything else at once. Publishing never raises: a failure
    is counted (`errors`, `dropped_events`, `last_error`) and training goes on."""

    def __init__(self, publish: Callable[[dict], Any], rank: int, min_interval: float = 0.25,
                 clock: Callable[[], float] = time.time):
        if min_interval < 0:
            raise ValueError(
                f"Invalid value for argument `min_interval`. Received: min_interval={min_interval!r}. "
                "Expected a number of seconds >= 0."
            )
        self._publish = publish
        self.rank = rank
        self.min_interval = min_interval
        self._clock = clock
        self._buffer: list[dict] = []
        self._last_flush = -float("inf")
        self.seq = 0
        self.errors = 0
        self.dropped_events = 0
        self.last_error: BaseException | None = None

    def emit(self, kind_or_event: str | Mapping[str, Any], **fields: Any) -> None:
        """Queue an event: emit("batch", epoch=0, step=3, logs={...}) or emit({"kind": ...}).

        "rank" and "time" are filled in when missing.
        """
        if isinstance(kind_or_event, Mapping):
            event = dict(kind_or_event, **fields)
        else:
            event = dict(fields, kind=kind_or_event)
        now = self._clock()
        event.setdefault("rank", self.rank)
        event.setdefault("time", now)
        self._buffer.append(event)
        if event["kind"] in _URGENT_KINDS or now - self._last_flush >= self.min_interval:
            self.flush()

    def report(self, metrics: Mapping[str, Any], step: int | None = None,
               epoch: float | None = None) -> None:
        """A custom training loop's metrics for the dashboard."""
        self.emit("report", step=step, epoch=epoch, metrics=plain_floats(metrics))

    def flush(self) -> None:
        """Publish what is buffered, under the next fresh key."""
        if not self._buffer:
            return
        events, self._buffer = self._buffer, []
        self._last_flush = self._clock()
        self.seq += 1
        try:
            self._publish({events_key(self.seq): events})
        except Exception as error:  # the dashboard is a nicety; training must go on
            self.errors += 1
            self.dropped_events += len(events)
            self.last_error = error

    __call__ = emit


def make_keras_callback(publisher: EventPublisher, samples_per_step: int | None = None):
    """A `tf.keras.callbacks.Callback` that reports fit and evaluate through `publisher`.

    `samples_per_step`: samples this worker consumes per step (under
    MultiWorkerMirroredStrategy, the global batch size / number of workers); when given,
    epoch events carry "samples" so the summary can show samples/s.
    """
    return _keras_callback_class()(publisher, samples_per_step)


@functools.cache
def _keras_callback_class():
    # Imported here so that the notebook side never loads TensorFlow; on the workers
    # TF_USE_LEGACY_KERAS is set before this runs, so tf.keras is tf-keras.
    import tensorflow as tf

    class KerasReportingCallback(tf.keras.callbacks.Callback):
        """Emits train_begin / batch / epoch / train_end events (mode "fit" or "evaluate")."""

        def __init__(self, publisher: EventPublisher, samples_per_step: int | None = None):
            super().__init__()
            self.publisher = publisher
            self.samples_per_step = samples_per_step
            self._in_fit = False        # fit runs on_test_* for validation; those are not ours
            self._epoch = 0
            self._steps_this_epoch = 0

        def _begin(self, mode: str) -> None:
            params = self.params or {}
            self.publisher.emit("train_begin", mode=mode, epochs=params.get("epochs"),
                                steps=params.get("steps"))

        def on_train_begin(self, logs=None):
            self._in_fit = True
            self._begin("fit")

        def on_epoch_begin(self, epoch, logs=None):
            self._epoch, self._steps_this_epoch = epoch, 0

        def on_train_batch_end(self, batch, logs=None):
            self._steps_this_epoch = batch + 1
            self.publisher.emit("batch", epoch=self._epoch, step=batch, logs=plain_floats(logs))

        def on_epoch_end(self, epoch, logs=None):
            event = {"epoch": epoch, "logs": plain_floats(logs)}
            if self.samples_per_step:
                event["samples"] = self._steps_this_epoch * self.samples_per_step
            self.publisher.emit("epoch", **event)

        def on_train_end(self, logs=None):
            self._in_fit = False
            self.publisher.emit("train_end")

        def on_test_begin(self, logs=None):
            if not self._in_fit:
                self._begin("evaluate")

        def on_test_batch_end(self, batch, logs=None):
            if not self._in_fit:
                self.publisher.emit("batch", epoch=0, step=batch, logs=plain_floats(logs))

        def on_test_end(self, logs=None):
            if not self._in_fit:
                self.publisher.emit("train_end", logs=plain_floats(logs))

    return KerasReportingCallback
