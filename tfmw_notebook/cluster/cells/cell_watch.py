"""Running one cell on every worker and watching it, until all finish or one fails.

The watch never hangs: a rank that raised, a dead engine, --timeout and the
interrupt button each end it with a WorkerFailed (nothing done yet), which the
recovery path (recovery.py) turns into keeping or restarting the workers.
"""

from __future__ import annotations

import itertools
import signal
import sys
import time
from dataclasses import dataclass, field

from ...errors import (
    Failure,
    WorkerFailed,
    headed,
    is_engine_death,
    remote_summary,
    remote_traceback,
)
from ...protocol.run_options import FitState, StallLimits
from ...protocol.tfconfig import EngineReport
from ..launch.engines import EngineGroup, is_this_host, pid_alive
from ..launch.launched_engines import exit_code
from ..launch.limits import POLL_SECONDS, SILENCE_SECONDS
from . import death_cause, worker_probe
from .beat_jitter import BeatJitter
from .liveness import SILENT, SilenceWatch, StallWatch
from .output import OutputRelay
from .run_settings import RunSettings
from .worker_calls import WorkerCalls
from .write_wait import let_write_end

# Errors a worker raises when a peer went away or a collective was aborted: the
# worker group cannot go on (a restart is needed, and --max-restarts retries them);
# anything else is the cell's own bug.
RETRYABLE_ERRORS = frozenset({"UnavailableError", "AbortedError", "CancelledError",
                              "DeadlineExceededError"})
_DRAIN_SECONDS = 5.0
_cell_numbers = itertools.count(1)


@dataclass
class RunResult:
    """What a cell left behind: the chief's last value's display data, timings."""

    display: dict | None
    seconds: float
    data: list[dict] = field(default_factory=list)  # per rank: what the rank published
    fits: list[list[dict]] = field(default_factory=list)  # per rank: each fit's end state
    runs: list[dict] = field(default_factory=list)  # the chief's record of each fit


@dataclass
class CellWatch:
    """One cell on `workers` (index = rank): submit it, then watch every rank."""

    calls: WorkerCalls
    workers: list[EngineReport]
    settings: RunSettings
    error_grace: float
    silence: float = SILENCE_SECONDS
    jitter: BeatJitter | None = None   # the cluster's, kept from cell to cell
    relay: OutputRelay = field(init=False, repr=False)
    _silence: SilenceWatch = field(init=False, repr=False)
    _stalls: StallWatch = field(init=False, repr=False)
    _warned: set = field(init=False, repr=False)
    _oom: death_cause.OomWatch = field(init=False, repr=False)
    _published: list[dict] = field(init=False, repr=False)   # per rank: ipyparallel's metadata
    _next_look: float = field(init=False, repr=False)   # when the watch next looks for the dead

    def __post_init__(self) -> None:
        settings = self.settings
        self.relay = OutputRelay(len(self.workers), all_output=settings.all_output,
                                 stdout=settings.stdout, stderr=settings.stderr)
        self._oom = death_cause.OomWatch()   # counted from before the cell

    @property
    def group(self) -> EngineGroup:
        return self.calls.group

    def run(self, source: str, state: FitState) -> RunResult:
        filename = f"<tfdist-cell-{next(_cell_numbers)}>"
        settings = self.settings
        began = time.perf_counter()
        futures = self.calls.submit_cell([w.engine_id for w in self.workers], source, filename,
                                         0 if settings.want_display else None,
                                         settings.options, state, settings.scope)
        # What each rank printed and published, read straight from ipyparallel's metadata
        # (each AsyncResult attribute read waits on two events and parses dates).
        self._published = [future.metadata for future in futures]
        timeout = settings.timeout
        try:
            self._watch(futures, None if timeout is None else time.monotonic() + timeout,
                        timeout)
        except WorkerFailed as failed:
            # The restart that may follow must not cut the chief's checkpoint write short
            # (none follows a controller that is gone, nor reaches a lost host).
            failure = failed.failure
            if failure.kind != "controller" and self.workers[0].host not in failure.lost_hosts:
                let_write_end(self._published[0]["data"], lambda: bool(self.dead_ranks([0])),
                              lambda text: print(text, file=self.settings.stderr or sys.stderr,
                                                 flush=True))
            raise
        outcomes = [future.get() for future in futures]
        return RunResult(display=outcomes[0]["display"], seconds=time.perf_counter() - began,
                         data=[dict(md["data"]) for md in self._published],
                         fits=[outcome["fits"] for outcome in outcomes],
                         runs=list(outcomes[0].get("runs") or []))

    def _watch(self, futures, deadline: float | None, timeout: float | None) -> None:
        """Wait for every rank; raise WorkerFailed on the first that fails, dies or overruns.

        After a rank raised, the others get `error_grace` seconds to finish: if
        they all do, the workers may be kept; one still running is taken to be
        blocked in a collective that will never complete.
        """
        first_error, grace_ends = None, 0.0
        self._next_look = time.monotonic() + POLL_SECONDS
        self._silence = SilenceWatch(len(futures), self.silence, jitter=self.jitter)
        self._stalls, self._warned = StallWatch(len(futures)), set()
        try:
            while True:
                # Taken before the look for errors: a rank that fails after that look is
                # seen on the next turn, not returned as done (its error raised raw).
                all_done = all(f.done() for f in futures)
                self._take_in(futures)
                self._check_heard_from(futures)
                self._check_stalls(futures)
                if first_error is None:
                    failed = next((r for r, f in enumerate(futures)
                                   if f.done() and f.exception()), None)
                    if failed is not None:
                        first_error = self._first_error(failed, futures)
                        grace_ends = time.monotonic() + self.error_grace
                self._check_dead(futures)
                if all_done:
                    self._drain(futures)
                    if first_error is not None:
                        raise self._error_fault(first_error, futures, all_finished=True)
                    return
                if first_error is not None and time.monotonic() > grace_ends:
                    raise self._error_fault(first_error, futures, all_finished=False)
                if deadline is not None and time.monotonic() > deadline:
                    raise _failed(f"the cell ran past `timeout={timeout:g}` s; every "
                                  "worker was stopped", kind="timeout")
                # Wait on a rank still running: a finished one's wait returns at once,
                # and the loop would spin on a core the last rank needs.
                running = next((f for f in futures if not f.done()), None)
                if running is not None:
                    running.wait(POLL_SECONDS)
        except KeyboardInterrupt:
            # What arrived while the loop waited (a fit's record after its last epoch, the
            # last output) is taken in first: the interrupted run's record keeps it.
            self._take_in(futures)
            raise _failed("interrupted: training was stopped on every worker",
                          kind="interrupt") from None

    def _check_dead(self, futures) -> None:
        """Ranks still running whose engine is gone, at most every POLL_SECONDS (a look reads
        each /proc entry, and each rank's reply is a loop turn: 8 ms a cell at N = 8)."""
        if time.monotonic() < self._next_look:
            return
        self._next_look = time.monotonic() + POLL_SECONDS
        dead = self.dead_ranks([r for r, f in enumerate(futures) if not f.done()])
        if dead:
            raise self._death(dead)

    def _take_in(self, futures) -> None:
        published = self._published
        self.relay.poll(lambda r: (published[r]["stdout"] or "", published[r]["stderr"] or ""),
                        len(futures))
        for rank, md in enumerate(published):
            self._silence.see(rank, md["data"])
            silent_for = self._silence.quiet_for(rank) if self._silence.busy(rank) else None
            self._stalls.see(rank, md["data"], len(md["stdout"] or "") + len(md["stderr"] or ""),
                             silent_for)
            if self.settings.on_data is not None:
                self.settings.on_data(rank, md["data"])

    def _check_heard_from(self, futures) -> None:
        """A running rank whose heartbeat stopped is looked at (worker_probe.py): one
        whose process runs is busy, not lost (a C call holds its GIL, say) and is
        waited for, like any slow rank; one stopped, gone or out of reach is lost.
        Unless the controller every beat passes through is the one gone (it no longer
        accepts connections)."""
        running = [rank for rank, future in enumerate(futures) if not future.done()]
        silent = self._silence.silent(running, {rank: self._published[rank]["data"]
                                                for rank in running})
        if not silent:
            return
        quiet = self._silence.quiet_for(silent[0])
        if not self.group.controller_answers():
            host, port = self.group.controller_address()
            raise _failed(f"the ipyparallel controller at {host}:{port} does not answer "
                          f"(no worker heard from for {quiet:.0f} s): it has stopped, or "
                          "its host is cut off", kind="controller")
        verdicts = dict(zip(silent, worker_probe.judge_all([self.workers[r] for r in silent])))
        for rank in (rank for rank, verdict in verdicts.items() if verdict == "busy"):
            self._silence.vouch(rank)
        lost = [rank for rank, verdict in verdicts.items() if verdict in ("stopped", "unreachable")]
        if lost:
            raise self._lost(lost, verdicts)
        gone = [rank for rank, verdict in verdicts.items() if verdict == "gone"]
        if gone:
            # Their hosts answer but refuse the workers' TensorFlow ports: the processes
            # are gone (a cancelled batch job, say), the hosts are not cut off.
            raise self._death(gone)

    def _lost(self, ranks: list[int], verdicts: dict[int, worker_probe.Verdict]) -> WorkerFailed:
        names = ", ".join(self._describe(rank) for rank in ranks)
        reasons = "; ".join(dict.fromkeys(_why_lost(self.workers[rank], verdicts[rank])
                                          for rank in ranks))
        cut_off = tuple(dict.fromkeys(self.workers[rank].host for rank in ranks
                                      if verdicts[rank] == "unreachable"))
        quiet = self._silence.quiet_for(ranks[0])
        return _failed(f"worker {names} not heard from for {quiet:.0f} s: {reasons}",
                       kind="lost", rank=ranks[0], retryable=not cut_off, lost_hosts=cut_off)

    def _check_stalls(self, futures) -> None:
        """Name a rank stuck in its own code while others wait (--stall-warning), and end
        the cell when it stays stuck too long (_stall_stop)."""
        limits = self.settings.stall
        hung = limits.hung if limits.timeout is None else None
        thresholds = [t for t in (limits.warning, limits.timeout, hung) if t is not None]
        if not thresholds:
            return
        running = [rank for rank, future in enumerate(futures) if not future.done()]
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
                if self.settings.on_stall is not None:
                    self.settings.on_stall(rank, seconds, where)

    def _describe(self, rank: int) -> str:
        worker = self.workers[rank]
        job = f", {worker.batch_job}" if worker.batch_job else ""
        return f"{rank} (pid {worker.pid} on {worker.host}{job}, {worker.address})"

    def _first_error(self, rank: int, futures) -> tuple[int, BaseException]:
        """Show the first failing rank's traceback at once; remember it."""
        exc = futures[rank].exception()
        if is_engine_death(exc):
            raise self._death([rank])
        self._take_in(futures)
        text = remote_traceback(exc)
        if text:
            stream = self.settings.stderr or sys.stderr
            stream.write(headed(text, rank, remote_summary(exc)))
            stream.flush()
        return rank, exc

    def _error_fault(self, first_error, futures, *, all_finished: bool) -> WorkerFailed:
        rank, exc = first_error
        errors = [f.exception() for f in futures if f.done() and f.exception()]
        died = [r for r, f in enumerate(futures)
                if f.done() and f.exception() and is_engine_death(f.exception())]
        if died:
            return self._death(died)
        return _failed(
            f"worker {rank} failed: {remote_summary(exc)}", kind="error", rank=rank,
            traceback=remote_traceback(exc), all_finished=all_finished,
            retryable=any(getattr(e, "ename", "") in RETRYABLE_ERRORS for e in errors),
            error_name=getattr(exc, "ename", "") or type(exc).__name__,
            error_value=str(getattr(exc, "evalue", "") or ""))

    def _death(self, ranks: list[int]) -> WorkerFailed:
        names = ", ".join(f"{self._describe(rank)} {self._death_words(rank)}"
                          for rank in ranks)
        return _failed(f"worker {names}", kind="died", rank=ranks[0], retryable=True)

    def _death_words(self, rank: int) -> str:
        """"died (killed by SIGKILL)" and the like; the cause is known only for a process
        of this host we launched ("died" otherwise)."""
        worker = self.workers[rank]
        if not is_this_host(worker.host):
            return "died"
        code = exit_code(self.group.cluster, worker.launched_as or worker.pid)
        killed = code is None or code == -signal.SIGKILL
        return death_cause.death_words(code, self._oom.kill_of(worker.pid) if killed else None)

    def _drain(self, futures) -> None:
        """Take in what the workers printed or published just before they finished.

        Output and published data travel on another socket than the reply, so
        they can arrive after it; wait (briefly) for each rank's output to end.
        """
        deadline = time.monotonic() + _DRAIN_SECONDS
        for future in futures:
            future.wait_for_output(max(0.0, deadline - time.monotonic()))
        self._take_in(futures)

    def dead_ranks(self, ranks: list[int]) -> list[int]:
        return dead_ranks(self.group, self.workers, ranks)


def _why_lost(worker: EngineReport, verdict: worker_probe.Verdict) -> str:
    if verdict == "unreachable":
        return "its host may be down or cut off from this one"
    if is_this_host(worker.host):
        return "its process is stopped"
    return "its host answers but its TensorFlow server does not: the process is stopped or hung"


def _stall_stop(limits: StallLimits, who: str, rank: int, seconds: float,
                where: str) -> WorkerFailed | None:
    """What ends the cell for a rank stalled `seconds`, if anything: --stall-timeout, any
    stall; without it, StallLimits.hung for a rank silent while its process runs. Such a
    rank is vouched for as busy as long as its process runs (worker_probe.py): one that
    never gives the GIL back would keep the cell, and the others, waiting forever."""
    if limits.timeout is not None:
        if seconds < limits.timeout:
            return None
        return _failed(f"worker {who} made no progress for {seconds:.0f} s, stuck "
                       f"{_place(where)} while the others waited "
                       f"(`StallLimits(timeout={limits.timeout:g})`); every worker was stopped",
                       kind="timeout", rank=rank)
    if where != SILENT or limits.hung is None or seconds < limits.hung:
        return None
    return _failed(f"worker {who} made no progress for {seconds:.0f} s {_place(where)} while "
                   f"the others waited: taken for hung after {limits.hung:g} s; every worker "
                   "was stopped", kind="lost", rank=rank, retryable=True)


def _place(where: str) -> str:
    """Where a stalled rank is stuck, for the notebook's messages."""
    if where == SILENT:
        return ("with its heartbeat silent while its process runs (a call that keeps "
                "Python's GIL, say)")
    return f"in its own code at {where}"


def _failed(summary: str, **details) -> WorkerFailed:
    """One attempt's failure, before recovery decided anything."""
    return WorkerFailed(Failure(summary, **details))


def dead_ranks(group: EngineGroup, workers: list[EngineReport],
               ranks: list[int] | None = None) -> list[int]:
    """Of `ranks` (all by default), those whose engine left the hub, or (on this host)
    whose process is gone."""
    registered = group.registered()
    return [rank for rank in (range(len(workers)) if ranks is None else ranks)
            if workers[rank].engine_id not in registered
            or (is_this_host(workers[rank].host) and not pid_alive(workers[rank].pid))]
