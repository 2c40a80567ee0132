"""Tests marked `alone` run with no test of another xdist process running beside them.

The suite runs two modules at a time (`pytest -n 2 --dist loadfile`). A few checks are
timings (a step's parts must add up to the step) or plain TensorFlow processes with no
heartbeat, and another module's load on 2 cores has broken them. Every other test holds a
shared lock on one file while it runs; an `alone` test holds it exclusively, so it starts once
the test running beside it has ended and the other process waits until it is done.

A second file is the turnstile: a test takes it before the shared lock, and an `alone` test
keeps it while it waits, so that the other process cannot start test after test ahead of it.
A run of `alone` tests in one module keeps the lock from the first to the last: the module's
cluster is set up and taken down inside it. Without xdist there is nobody to wait for.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator

import pytest

# Long enough for the longest test beside it to end; a wait must have a deadline.
WAIT_S = 1800.0


def _lock_dir(config: pytest.Config) -> str | None:
    """The run's temp directory, shared by its xdist processes (each has a directory in it)."""
    if not hasattr(config, "workerinput") or not config.option.basetemp:
        return None
    return os.path.dirname(os.path.abspath(config.option.basetemp))


def _alone(item: pytest.Item | None) -> bool:
    return item is not None and item.get_closest_marker("alone") is not None


def _lock(fd: int, kind: int, deadline: float) -> None:
    while True:
        try:
            fcntl.flock(fd, kind | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"waited {WAIT_S:.0f} s for the test run beside this one "
                                   "to let it run alone") from None
            time.sleep(0.2)


class MachineShare:
    """This process's hold on the machine: shared, exclusive or none, between tests."""

    def __init__(self, config: pytest.Config) -> None:
        directory = _lock_dir(config)
        self.room_path = directory and os.path.join(directory, "tests-beside-each-other")
        self.turnstile_path = directory and os.path.join(directory, "tests-turnstile")
        self.room: int | None = None
        self.turnstile: int | None = None
        self.exclusive = False

    @contextlib.contextmanager
    def around(self, item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
        if self.room_path is None:
            yield
            return
        if not self.exclusive:
            self._take(exclusive=_alone(item))
        try:
            yield
        finally:
            if not (_alone(item) and _alone(nextitem)
                    and getattr(nextitem, "module", None) is getattr(item, "module", None)):
                self._release()

    def _open(self, path: str | None) -> int:
        assert path is not None
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o600)

    def _take(self, *, exclusive: bool) -> None:
        self.turnstile, self.room = self._open(self.turnstile_path), self._open(self.room_path)
        deadline = time.monotonic() + WAIT_S
        _lock(self.turnstile, fcntl.LOCK_EX, deadline)
        if exclusive:    # the turnstile stays held: no new test starts beside it
            _lock(self.room, fcntl.LOCK_EX, deadline)    # the test beside it has ended
            self.exclusive = True
        else:
            _lock(self.room, fcntl.LOCK_SH, deadline)
            fcntl.flock(self.turnstile, fcntl.LOCK_UN)

    def _release(self) -> None:
        for fd in (self.room, self.turnstile):
            if fd is not None:
                os.close(fd)                         # closing the file drops its lock
        self.room = self.turnstile = None
        self.exclusive = False
