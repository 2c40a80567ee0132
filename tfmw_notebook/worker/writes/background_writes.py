"""One write at a time, off the training thread: the automatic checkpoints and the
end-of-fit snapshots (checkpointing.py, fit_state.py).

The training thread hands a write over and goes on training. The next hand-over and the
end of the cell wait for it first, and raise what it raised: a write that failed is
reported on the training thread at the next save or at the cell's end. One write at a
time keeps memory bounded (one snapshot of the weights in flight) and commits in order.

The notebook is told when a write begins and ends (WRITING_KEY, on the channel of the
dashboard's events): it restarts workers at once after an interrupt or a failure (they
are busy in the cell and get no signal), and waits for a write under way first. A worker
that dies while a write runs leaves that checkpoint uncommitted (its temporary
directory), the earlier ones intact.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable
from typing import Any

from ...protocol.events import WRITING_KEY

WRITER_THREAD = "tfmw-checkpoint-writer"
_JOIN_STEP = 0.25   # joined in steps: the notebook's interrupt reaches a waiting cell

_pending: threading.Thread | None = None
_failure: BaseException | None = None
_tell: Callable[[dict], Any] | None = None   # publishes to the notebook (set per cell)


def tell_with(publish: Callable[[dict], Any] | None) -> None:
    """How writes are announced to the notebook (None: not at all, outside a cell)."""
    global _tell
    _tell = publish


def hand_over(write: Callable[[], None], *, queued: bool = False) -> None:
    """Run `write` on the writer thread, once the previous write has ended. `queued`: the
    training thread does not wait for that write; `write` runs after it (a failure of
    either is raised by the next `wait`)."""
    global _pending
    previous = _pending if queued else None
    if not queued:
        wait()
    # Told before the write starts, from this thread: the notebook sees it in order with
    # the epoch's events, before anything that could make it restart the workers.
    _announce(True)
    thread = threading.Thread(target=_run, args=(write, previous), name=WRITER_THREAD,
                              daemon=True)
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


def wait_after_error() -> None:
    """At the end of a cell that raised: let the write end, so the workers' restart that
    may follow loses nothing, and say on stderr if it failed too (the cell's own error is
    the one raised)."""
    try:
        wait()
    except Exception as error:
        print(f"tfdist: a checkpoint write failed as well: {type(error).__name__}: {error}",
              file=sys.stderr)


def in_flight() -> bool:
    return _pending is not None and _pending.is_alive()


def _run(write: Callable[[], None], previous: threading.Thread | None = None) -> None:
    global _failure
    try:
        if previous is not None:   # a queued write: the one before it ends first
            previous.join()
            _announce(True)        # that one's end said no write was under way
        write()
    except BaseException as error:   # reported on the training thread by wait()
        _failure = error
    finally:
        _announce(False)


def _announce(writing: bool) -> None:
    publish = _tell
    if publish is not None:
        with contextlib.suppress(Exception):   # telling is a courtesy: the write goes on
            publish({WRITING_KEY: writing})
