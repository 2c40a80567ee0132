"""One write at a time, off the training thread: the end-of-fit snapshots (fit_state.py).

The training thread hands a write over and goes on training. The next hand-over and the
end of the cell wait for it first, and raise what it raised: a write that failed is
reported on the training thread at the next save or at the cell's end. One write at a
time keeps memory bounded (one snapshot of the weights in flight) and commits in order.
A worker that dies while a write runs leaves that snapshot unwritten: its cell failed,
and only cells that ended are replayed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

WRITER_THREAD = "tfmw-checkpoint-writer"
_JOIN_STEP = 0.25   # joined in steps: the notebook's interrupt reaches a waiting cell

_pending: threading.Thread | None = None
_failure: BaseException | None = None


def hand_over(write: Callable[[], None]) -> None:
    """Run `write` on the writer thread, once the previous write has ended."""
    global _pending
    wait()
    thread = threading.Thread(target=_run, args=(write,), name=WRITER_THREAD, daemon=True)
    _pending = thread
    thread.start()


def wait() -> None:
    """Return once no write runs; raise the error of one that failed (once)."""
    global _pending, _failure
    thread = _pending
    while thread is not None and thread.is_alive():
        thread.join(_JOIN_STEP)
    _pending = None
    failure, _failure = _failure, None
    if failure is not None:
        raise failure


def in_flight() -> bool:
    return _pending is not None and _pending.is_alive()


def _run(write: Callable[[], None]) -> None:
    global _failure
    try:
        write()
    except BaseException as error:   # reported on the training thread by wait()
        _failure = error
