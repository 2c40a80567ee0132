"""A SIGTERM during a fit that can back up (a preemption) is kept for the fit, not obeyed at once.

Slurm's preemption and a spot VM's notice send SIGTERM, then SIGKILL some seconds later.
A worker that ended at once (bootstrap.py's default) lost every step since the last
periodic backup. While a fit with an automatic backup and a grace period runs, the signal
is only noted here: the fit's callback (keras_preemption.py) finds it at the next step the
workers agree on, every worker backs up there, and the fit ends with a retryable error
that --max-restarts resumes from. The process still ends when the grace period is over,
saved or not: the signal asked it to stop, and its sender's SIGKILL would come anyway.

A SIGTERM after the fit's last agreed step (during its last epoch's end, or after fit()
returned, in the same cell) finds no step left to back up at, and the fit's work is
done: the worker neither ends at once (a --max-restarts rerun of the cell would train
the finished fit again: its backup is deleted at its end) nor backs up. It stays armed
until the cell's end, so the cell runs through and its results stand; the cell's end
says so (`cell_ended`, a line on the worker's stderr), the process ends at the grace
period's end, and the next cell restarts the workers with their state restored.
Standard library only: the signal handler must not wait on TensorFlow.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class _Preemption:
    grace: float | None = None   # set from a fit that can back up to its cell's end
    requested: bool = False      # a SIGTERM came then
    answered: bool = False       # a fit backed up for it (and raised)
    deadline: threading.Timer | None = None


_state = _Preemption()


def arm(grace: float | None) -> None:
    """A fit that backs up on SIGTERM begins (None: it does not)."""
    if grace is not None:   # a later fit of the cell without one keeps the cell's
        _state.grace = grace


def answered() -> None:
    """The fit backed up for the signal and ends: a later SIGTERM ends the process at
    once (a deadline already running stays: the process was asked to stop)."""
    _state.grace = None
    _state.answered = _state.requested


def cell_ended() -> str:
    """The cell's end: a later SIGTERM ends the process at once again. Returns what the
    notebook is told when a SIGTERM came after the fit's last agreed step ("" else)."""
    grace, _state.grace = _state.grace, None
    if not _state.requested or _state.answered or grace is None:
        return ""
    return (f"tfdist: this worker was asked to stop (SIGTERM, a preemption) after its fit's "
            f"last agreed step: the cell ran to its end and its results stand; the worker "
            f"ends within {grace:g} s of the signal, and the next cell restarts the workers "
            f"with their state restored")


def requested() -> bool:
    """Whether this worker was sent SIGTERM while an armed fit ran."""
    return _state.requested


def on_sigterm(exit_now: Callable[[], None]) -> None:
    """The SIGTERM handler's decision: note it and leave `grace` seconds for the fit to
    back up, or `exit_now()` when no armed fit runs."""
    grace = _state.grace
    if grace is None:
        exit_now()
        return
    if _state.requested:      # a second SIGTERM: the first one's deadline holds
        return
    _state.requested = True
    timer = threading.Timer(grace, exit_now)
    timer.daemon = True
    timer.start()
    _state.deadline = timer
