"""A rank stuck in its own code while the others wait: named, then the cell ended.

The cell watch (cell_watch.py) feeds `StallCheck` each rank's published data and output
at every look; liveness.py's StallWatch keeps since when each rank has made no progress.
Past --stall-warning the rank is named once (and `on_stall` told at each look); past
--stall-timeout, or StallLimits.hung for a rank silent while its process runs, the cell
ends with a WorkerFailed.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from ...errors import WorkerFailed
from ...protocol.run_options import StallLimits
from .cell_failures import worker_failed
from .liveness import SILENT, StallWatch
from .run_settings import RunSettings


class StallCheck:
    """Stalls of one cell on `size` ranks, named with `describe(rank)`."""

    def __init__(self, size: int, settings: RunSettings, describe: Callable[[int], str]):
        self.limits = settings.stall
        self.on_stall = settings.on_stall
        self._describe = describe
        self._stalls = StallWatch(size)
        self._warned: set[int] = set()

    def see(self, rank: int, published: dict, silent_for: float | None) -> None:
        """Take in `rank`'s published metadata (its data, what it printed so far);
        `silent_for`: how long it has not beaten, if it is busy (liveness.py)."""
        printed = len(published["stdout"] or "") + len(published["stderr"] or "")
        self._stalls.see(rank, published["data"], printed, silent_for)

    def check(self, running: list[int]) -> None:
        """Name a rank stuck in its own code while others wait (--stall-warning), and end
        the cell when it stays stuck too long (_stall_stop)."""
        limits = self.limits
        hung = limits.hung if limits.timeout is None else None
        thresholds = [t for t in (limits.warning, limits.timeout, hung) if t is not None]
        if not thresholds:
            return
        for rank, seconds, where in self._stalls.stalled(running, min(thresholds)):
            stop = _stall_stop(limits, self._describe(rank), rank, seconds, where)
            if stop is not None:
                raise stop
            if limits.warning is not None and seconds >= limits.warning:
                if rank not in self._warned:
                    self._warned.add(rank)
                    sys.stderr.write(f"tfdist: worker {self._describe(rank)} has made no "
                                     f"progress for {seconds:.0f} s, {_place(where)}, "
                                     "while the others wait for it\n")
                    sys.stderr.flush()
                if self.on_stall is not None:
                    self.on_stall(rank, seconds, where)


def _stall_stop(limits: StallLimits, who: str, rank: int, seconds: float,
                where: str) -> WorkerFailed | None:
    """What ends the cell for a rank stalled `seconds`, if anything: --stall-timeout, any
    stall; without it, StallLimits.hung for a rank silent while its process runs. Such a
    rank is vouched for as busy as long as its process runs (worker_probe.py): one that
    never gives the GIL back would keep the cell, and the others, waiting forever."""
    if limits.timeout is not None:
        if seconds < limits.timeout:
            return None
        return worker_failed(f"worker {who} made no progress for {seconds:.0f} s, stuck "
                             f"{_place(where)} while the others waited "
                             f"(`StallLimits(timeout={limits.timeout:g})`); every worker was "
                             "stopped", kind="timeout", rank=rank)
    if where != SILENT or limits.hung is None or seconds < limits.hung:
        return None
    return worker_failed(f"worker {who} made no progress for {seconds:.0f} s {_place(where)} "
                         f"while the others waited: taken for hung after {limits.hung:g} s; "
                         "every worker was stopped", kind="lost", rank=rank, retryable=True)


def _place(where: str) -> str:
    """Where a stalled rank is stuck, for the notebook's messages."""
    if where == SILENT:
        return ("with its heartbeat silent while its process runs (a call that keeps "
                "Python's GIL, say)")
    return f"in its own code at {where}"
