"""While a cell runs, a worker tells the notebook every second that it is alive.

A worker on another host can vanish without its engine leaving the controller for
about 30 s (a controller the user started keeps ipyparallel's default heartbeat),
and a host cut off from the network cannot even be told apart from a slow one.
The beats travel like the dashboard's events (ipyparallel's data channel, through
the controller), from a thread of their own: TensorFlow releases the GIL in its
ops, so a worker busy training still beats; a stopped or unreachable one does not.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

from ...protocol.events import ALIVE_KEY, HEARTBEAT_SECONDS, WHERE_KEY
from .whereabouts import main_thread_whereabouts


class Heartbeat:
    """`with Heartbeat(publish):` beats until the block ends.

    The beats come from one thread per process, started by the first block and then
    idle between blocks: a thread started and joined per cell cost every worker
    ~0.5 ms of each cell (measured), and a trivial cell on N workers pays that N times.
    """

    def __init__(self, publish: Callable[[dict], Any], period: float = HEARTBEAT_SECONDS,
                 check: Callable[[], Any] | None = None):
        self._publish = publish
        self.period = period
        self.check = check  # also run at every beat (controller_watch.check)
        self.beats = 0
        self.due = 0.0      # when the next beat is due (time.monotonic), set by the beater

    def __enter__(self) -> Heartbeat:
        # The first beat one period in: the notebook counts silence from the cell's start,
        # and a short cell then sends no beat at all (one message per worker less).
        _beater.begin(self)
        return self

    def __exit__(self, *exc_info) -> None:
        _beater.end(self)

    def beat(self) -> None:
        self.beats += 1
        with contextlib.suppress(Exception):  # a lost beat only makes the notebook look sooner
            self._publish({ALIVE_KEY: self.beats, WHERE_KEY: main_thread_whereabouts()})


class _Beater:
    """The thread that beats for the block under way, if any. No beat is sent once its
    block has ended: a beat and `end` take the same lock.

    A block's start wakes the thread only when it idles (no block since its last wait
    ended); its end wakes it never: a thread still waiting for an earlier block's beat
    wakes no later than the new block's first one is due (that block began later), and
    then waits for it. Waking it at each start and end cost each worker two turns of
    that thread per cell (measured: ~0.1 ms of CPU of a trivial cell's 1.7 ms per worker)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._current: Heartbeat | None = None
        self._thread: threading.Thread | None = None
        self._idle = False   # the thread waits for a block, with no deadline
        self.waits = self.wakes = 0   # the thread's waits begun and ended (tests count them)

    def begin(self, heartbeat: Heartbeat) -> None:
        with self._lock:
            heartbeat.due = time.monotonic() + heartbeat.period
            self._current = heartbeat
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="tfdist-heartbeat",
                                                daemon=True)
                self._thread.start()
            elif self._idle:
                self._wake.notify()

    def end(self, heartbeat: Heartbeat) -> None:
        with self._lock:
            if self._current is heartbeat:
                self._current = None

    def _run(self) -> None:
        while True:
            with self._lock:
                beating = self._next_due()
                beating.beat()
            if beating.check is not None:
                beating.check()
            beating.due = time.monotonic() + beating.period

    def _next_due(self) -> Heartbeat:
        """Wait (holding the lock between waits) until a block's beat is due; that block."""
        while True:
            current = self._current
            self._idle = current is None
            delay = None if current is None else current.due - time.monotonic()
            if current is not None and delay is not None and delay <= 0:
                return current
            self.waits += 1
            self._wake.wait(delay)   # None: until a block begins
            self.wakes += 1


_beater = _Beater()


def engine_publish() -> Callable[[dict], Any]:
    """ipyparallel's publish_data on an engine (it sends through a thread-safe socket)."""
    from ipyparallel.datapub import publish_data

    return publish_data
