"""Which workers have gone silent, or stalled, while a cell runs (pure; fed the
published data).

Each worker's heartbeat (worker/liveness/heartbeat.py) is a count that grows every second.
A rank whose count has not moved for the limit is silent: `silence` seconds, or more
where the gaps between beats measured on these workers are longer (beat_jitter.py).
The cell watch then looks at its process (worker_probe.py). One seen running is busy
(its Python threads cannot run: a C call holds the GIL, say), is vouched for, and asked
again a second later; one stopped, gone or out of reach is lost. Ranks that finished
the cell are not watched.

A stalled rank makes no progress (no event, no output) while its main thread sits
in its own code, or holds the GIL so that its heartbeat is silent, and some other
rank waits inside TensorFlow: a deadlock, a sleep or an endless loop in one rank.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from ...protocol.events import ALIVE_KEY, FRAMEWORK, HEARTBEAT_SECONDS, WHERE_KEY
from .beat_jitter import BeatJitter

# Where a busy rank is, for StallWatch: its heartbeat, which says where, cannot run.
SILENT = "<silent>"


class SilenceWatch:
    def __init__(self, size: int, silence: float, clock: Callable[[], float] = time.monotonic,
                 recheck: float = HEARTBEAT_SECONDS, jitter: BeatJitter | None = None):
        if silence <= 0:
            raise ValueError(f"silence must be > 0 seconds, got {silence!r}")
        self.silence = silence
        self.jitter = jitter if jitter is not None else BeatJitter()
        self.recheck = recheck   # how long a probe's word that a rank runs holds
        self._clock = clock
        now = clock()
        self._heard_at = [now] * size      # the cell's start counts as a sign of life
        self._count: list[Any] = [None] * size
        self._vouched_at = [float("-inf")] * size

    def see(self, rank: int, data: Mapping | None) -> None:
        count = (data or {}).get(ALIVE_KEY)
        if count is not None and count != self._count[rank]:
            now = self._clock()
            if isinstance(self._count[rank], int) and isinstance(count, int):
                # Not the first beat: that one is counted from the cell's start.
                self.jitter.add(now - self._heard_at[rank], count - self._count[rank])
            self._count[rank] = count
            self._heard_at[rank] = now

    def limit(self) -> float:
        """Seconds without a beat after which a running rank is silent."""
        return self.jitter.threshold(self.silence)

    def quiet_for(self, rank: int) -> float:
        return self._clock() - self._heard_at[rank]

    def silent(self, running: list[int],
               latest: Mapping[int, Mapping | None] | None = None) -> list[int]:
        """The running ranks not heard from for `limit()` seconds, and not vouched for
        in the last `recheck` seconds.

        `latest`: each running rank's published data as it stands now. The notebook's
        loop may have been held up since it last looked (its first dashboard drawing
        imported matplotlib for 7.9 s on a loaded machine, measured) while the beats
        kept arriving: they are taken in before anyone is judged."""
        for rank in running:
            self.see(rank, (latest or {}).get(rank))
        now, limit = self._clock(), self.limit()
        return [rank for rank in running if self.quiet_for(rank) >= limit
                and now - self._vouched_at[rank] >= self.recheck]

    def vouch(self, rank: int) -> None:
        """A probe saw the silent rank's process run: it is busy, not lost."""
        self._vouched_at[rank] = self._clock()

    def busy(self, rank: int) -> bool:
        """Silent, but seen running since its last beat."""
        return self._vouched_at[rank] > self._heard_at[rank]


class StallWatch:
    """Since when each rank has made no progress while in its own code."""

    def __init__(self, size: int, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        now = clock()
        self._since = [now] * size
        self._where: list[str | None] = [None] * size
        self._progress: list[Any] = [None] * size

    def see(self, rank: int, data: Mapping | None, output_size: int,
            silent_for: float | None = None) -> None:
        """`data`: the rank's published data; `output_size`: characters it printed;
        `silent_for`: how long a busy rank (SilenceWatch.busy) has not beaten."""
        data = data or {}
        where = data.get(WHERE_KEY)
        progress = (len(data), output_size)   # a new publish adds a key
        now = self._clock()
        if silent_for is not None and where in (None, FRAMEWORK):
            where = SILENT   # its last beat's place is stale: no known progress since
        if progress != self._progress[rank] or where in (None, FRAMEWORK):
            self._since[rank] = now
        elif silent_for is not None:
            self._since[rank] = min(self._since[rank], now - silent_for)
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
