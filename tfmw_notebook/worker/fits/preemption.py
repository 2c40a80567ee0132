"""A SIGTERM during a fit that can back up (a preemption) is kept for the fit, not obeyed at once.

Slurm's preemption and a spot VM's notice send SIGTERM, then SIGKILL some seconds later.
A worker that ended at once (bootstrap.py's default) lost every step since the last
periodic backup. While a fit with an automatic backup and a grace period runs, the signal
is only noted here: the fit's callback (keras_preemption.py) finds it at the next step the
workers agree on, every worker backs up there, and the fit ends with a retryable error
that --max-restarts resumes from. The process still ends when the grace period is over,
saved or not: the signal asked it to stop, and its sender's SIGKILL would come anyway.
Standard library only: the signal handler must not wait on TensorFlow.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class _Preemption:
    grace: float | None = None          # set while a fit that can back up runs
    requested: bool = False             # a SIGTERM came while one did
    deadline: threading.Timer | None = None


_state = _Preemption()


def arm(grace: float | None) -> None:
    """A fit that backs up on SIGTERM begins (None: it does not)."""
    _state.grace = grace


def disarm() -> None:
    """That fit ended: a later SIGTERM ends the process at once again (a deadline already
    running stays: the process was asked to stop)."""
    _state.grace = None


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
