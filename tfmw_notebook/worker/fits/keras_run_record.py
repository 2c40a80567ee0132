"""The Keras callback that fills the chief's record of a fit: per-epoch metrics and speed.

Loaded through keras_callbacks.py, which puts it on the model's Keras. It publishes the record
at the fit's start and after each epoch, so the notebook has it even when the fit
fails or is interrupted; a fit that returns hands it back in the cell's outcome too.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ..experiments import run_facts, trial_report
from .callback_logic import CallbackLogic


class RunRecorder(CallbackLogic):
    """Adds to `record` (a dict the hooks keep) what the fit did; `publish(record)` sends it."""

    def __init__(self, record: dict[str, Any], publish: Callable[[dict[str, Any]], None]):
        super().__init__()
        self.record = record
        self.publish = publish
        self._began = time.perf_counter()
        self._first_step = 0

    def on_train_begin(self, logs=None):
        self._began = time.perf_counter()
        self._first_step = self._step()
        self.record["hyperparameters"].update(run_facts.model_facts(self.model))
        self.publish(self.record)

    def on_epoch_end(self, epoch, logs=None):
        for name, value in (logs or {}).items():
            self.record["history"].setdefault(name, []).append(run_facts.plain(value))
        self.record["epochs"].append(int(epoch))
        if self.record["hyperparameters"].get("parameters") is None:
            self.record["hyperparameters"]["parameters"] = run_facts.parameter_count(self.model)
        self._measure()
        self.publish(self.record)

    def on_train_end(self, logs=None):
        self._measure()
        pruned_at = trial_report.report()["pruned_at"]
        if pruned_at is not None:   # a sweep's --prune stopped this fit
            self.record["pruned_at"] = pruned_at
        self.publish(self.record)

    def _measure(self) -> None:
        seconds = time.perf_counter() - self._began
        self.record["wall_time"] = seconds
        steps = self._step() - self._first_step
        batch = self.record["hyperparameters"].get("batch_size")
        self.record["steps"] = steps
        if batch and steps > 0 and seconds > 0:
            self.record["samples_per_second"] = steps * batch / seconds

    def _step(self) -> int:
        optimizer = getattr(self.model, "optimizer", None)
        try:
            return int(optimizer.iterations.numpy()) if optimizer is not None else 0
        except Exception:
            return 0
