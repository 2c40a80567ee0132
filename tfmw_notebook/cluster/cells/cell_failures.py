"""What a watched cell's failure says: which worker, how it ended, whether a restart may help.

The cell watch (cell_watch.py) decides that a cell failed; `CellFailures` words that as
the WorkerFailed it raises, naming each worker as the notebook shows it (rank, pid, host,
batch job, address) and, for a process of this host that died, why (death_cause.py).
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, field

from ...errors import Failure, WorkerFailed, is_engine_death, remote_summary, remote_traceback
from ...protocol.tfconfig import EngineReport
from ..launch.engines import EngineGroup, is_this_host
from ..launch.launched_engines import exit_code
from . import death_cause, worker_probe

# Errors a worker raises when a peer went away or a collective was aborted: the
# worker group cannot go on (a restart is needed, and --max-restarts retries them);
# anything else is the cell's own bug.
RETRYABLE_ERRORS = frozenset({"UnavailableError", "AbortedError", "CancelledError",
                              "DeadlineExceededError"})


@dataclass
class CellFailures:
    """The WorkerFailed for each way one cell on `workers` (index = rank) can end badly."""

    group: EngineGroup
    workers: list[EngineReport]
    # OOM kills counted from before the cell: a worker that died may be one of those since.
    oom: death_cause.OomWatch = field(default_factory=death_cause.OomWatch, repr=False)

    def describe(self, rank: int) -> str:
        worker = self.workers[rank]
        job = f", {worker.batch_job}" if worker.batch_job else ""
        return f"{rank} (pid {worker.pid} on {worker.host}{job}, {worker.address})"

    def raised(self, rank: int, exc: BaseException, futures, *,
               all_finished: bool) -> WorkerFailed:
        """Rank `rank` raised `exc` first; a rank whose engine died since says more."""
        errors = [f.exception() for f in futures if f.done() and f.exception()]
        died = [r for r, f in enumerate(futures)
                if f.done() and f.exception() and is_engine_death(f.exception())]
        if died:
            return self.died(died)
        return worker_failed(
            f"worker {rank} failed: {remote_summary(exc)}", kind="error", rank=rank,
            traceback=remote_traceback(exc), all_finished=all_finished,
            retryable=any(getattr(e, "ename", "") in RETRYABLE_ERRORS for e in errors),
            error_name=getattr(exc, "ename", "") or type(exc).__name__,
            error_value=str(getattr(exc, "evalue", "") or ""))

    def died(self, ranks: list[int]) -> WorkerFailed:
        names = ", ".join(f"{self.describe(rank)} {self._death_words(rank)}"
                          for rank in ranks)
        return worker_failed(f"worker {names}", kind="died", rank=ranks[0], retryable=True)

    def _death_words(self, rank: int) -> str:
        """"died (killed by SIGKILL)" and the like; the cause is known only for a process
        of this host we launched ("died" otherwise)."""
        worker = self.workers[rank]
        if not is_this_host(worker.host):
            return "died"
        code = exit_code(self.group.cluster, worker.launched_as or worker.pid)
        killed = code is None or code == -signal.SIGKILL
        return death_cause.death_words(code, self.oom.kill_of(worker.pid) if killed else None)

    def lost(self, ranks: list[int], verdicts: dict[int, worker_probe.Verdict],
             quiet: float) -> WorkerFailed:
        """Silent `ranks` the probe found stopped or out of reach, the first for `quiet` s."""
        names = ", ".join(self.describe(rank) for rank in ranks)
        reasons = "; ".join(dict.fromkeys(_why_lost(self.workers[rank], verdicts[rank])
                                          for rank in ranks))
        cut_off = tuple(dict.fromkeys(self.workers[rank].host for rank in ranks
                                      if verdicts[rank] == "unreachable"))
        return worker_failed(f"worker {names} not heard from for {quiet:.0f} s: {reasons}",
                             kind="lost", rank=ranks[0], retryable=not cut_off,
                             lost_hosts=cut_off)

    def controller_gone(self, quiet: float) -> WorkerFailed:
        host, port = self.group.controller_address()
        return worker_failed(f"the ipyparallel controller at {host}:{port} does not answer "
                             f"(no worker heard from for {quiet:.0f} s): it has stopped, or "
                             "its host is cut off", kind="controller")


def _why_lost(worker: EngineReport, verdict: worker_probe.Verdict) -> str:
    if verdict == "unreachable":
        return "its host may be down or cut off from this one"
    if is_this_host(worker.host):
        return "its process is stopped"
    return "its host answers but its TensorFlow server does not: the process is stopped or hung"


def worker_failed(summary: str, **details) -> WorkerFailed:
    """One attempt's failure, before recovery decided anything."""
    return WorkerFailed(Failure(summary, **details))
