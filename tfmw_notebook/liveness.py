"""Which workers have gone silent while a cell runs (pure; fed the published data).

Each worker's heartbeat (worker/heartbeat.py) is a count that grows every second.
A rank whose count has not moved for `silence` seconds is taken to be lost: its
host down, or cut off from this one. Ranks that finished the cell are not watched.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping

from .events import ALIVE_KEY


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
