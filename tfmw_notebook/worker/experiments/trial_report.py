"""What a sweep's trial saw on this worker: its monitored value per epoch, where it stopped.

Written by the trial monitor callback (keras_trial_monitor.py) as each epoch ends,
cleared before every cell (keras_hooks.configure), read by the notebook after a
trial through the entry `trial_report`. No TensorFlow here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class TrialReport:
    metric: str | None = None        # what was read from the logs (monitor or fallback)
    values: list[float] = field(default_factory=list)   # per epoch, the workers' mean
    pruned_at: int | None = None     # epochs done when the fit was stopped
    logged: list[str] = field(default_factory=list)     # the metrics the last epoch logged


_report = TrialReport()


def reset() -> None:
    """A new cell: nothing of the last trial is reported for it."""
    global _report
    _report = TrialReport()


def begin_fit() -> None:
    """Each fit of a trial starts afresh: the trial is its last fit."""
    reset()


def epoch_end(metric: str | None, value: float | None, logged: list[str]) -> None:
    _report.logged = sorted(logged)
    if metric is not None and value is not None:
        _report.metric = metric
        _report.values.append(value)


def pruned(epochs_done: int) -> None:
    if _report.pruned_at is None:   # the first stop is where it was pruned
        _report.pruned_at = epochs_done


def report() -> dict[str, Any]:
    return {"metric": _report.metric, "values": list(_report.values),
            "pruned_at": _report.pruned_at, "logged": list(_report.logged)}
