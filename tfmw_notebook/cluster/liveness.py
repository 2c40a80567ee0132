"""Which workers have gone silent, or stalled, while a cell runs (pure; fed the
published data).

Each worker's heartbeat (worker/heartbeat.py) is a count that grows every second.
A rank whose count has not moved for `silence` seconds is taken to be lost: its
host down, or cut off from this one. Ranks that finished the cell are not watched.

A stalled rank still beats, but makes no progress (no event, no output) while its
main thread sits in its own code and some other rank waits inside TensorFlow:
a deadlock, a sleep or an endless loop in one rank's code.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from ..protocol.events import ALIVE_KEY, FRAMEWORK, WHERE_KEY


class SilenceWatch:
    def __init__(self, size: int, silence: float, clock: Callable[[], float] = time.monotonic):
        if silence <= 0:
            raise ValueError(f"silence must be > 0 seconds, got {silence!r}")
        self.silence = silence
        self._clock = clock
        now = clock()
        self._heard_at = [now] * size      # the cell's start counts as a sign of life
        self._count: list[Any] = [None] * size

    def see(self, rank: int, data: Mapping | None) -> None:
        count = (data or {}).get(ALIVE_KEY)
        if count is not None and count != self._count[rank]:
            self._count[rank] = count
            self._heard_at[rank] = self._clock()

    def quiet_for(self, rank: int) -> float:
        return self._clock() - self._heard_at[rank]

    def silent(self, running: list[int]) -> list[int]:
        """The running ranks not heard from for `silence` seconds."""
        return [rank for rank in running if self.quiet_for(rank) >= self.silence]


class StallWatch:
    """Since when each rank has made no progress while in its own code."""

    def __init__(self, size: int, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        now = clock()
        self._since = [now] * size
        self._where: list[str | None] = [None] * size
        self._progress: list[Any] = [None] * size

    def see(self, rank: int, data: Mapping | None, output_size: int) -> None:
        """`data`: the rank's published data; `output_size`: characters it printed."""
        data = data or {}
        where = data.get(WHERE_KEY)
        progress = (len(data), output_size)   # a new publish adds a key
        if progress != self._progress[rank] or where in (None, FRAMEWORK):
            self._since[rank] = self._clock()
        self._progress[rank] = progress
        self._where[rank] = where

    def stalled(self, running: list[int], after: float) -> list[tuple[int, float, str]]:
        """(rank, seconds, where) of running ranks stalled for `after` seconds or more,
        while another running rank waits in the framework."""
        if not any(self._where[rank] == FRAMEWORK for rank in running):
            return []
        now = self._clock()
        return [(rank, now - self._since[rank], where) for rank in running
                if (where := self._where[rank]) is not None and where != FRAMEWORK
                and now - self._since[rank] >= after]
