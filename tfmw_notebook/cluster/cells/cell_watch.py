"""Running one cell on every worker and watching it, until all finish or one fails.

The watch never hangs: a rank that raised, a dead engine, --timeout and the
interrupt button each end it with a WorkerFailed (nothing done yet; worded by
cell_failures.py, stalls judged by stall_check.py), which the recovery path
(recovery.py) turns into keeping or restarting the workers.
"""

from __future__ import annotations

import itertools
import sys
import threading
import time
from dataclasses import dataclass, field

from ...errors import WorkerFailed, headed, is_engine_death, remote_summary, remote_traceback
from ...protocol.run_options import FitState
from ...protocol.tfconfig import EngineReport
from ..launch.engines import EngineGroup, is_this_host, pid_alive
from ..launch.limits import POLL_SECONDS, SILENCE_SECONDS
from . import worker_probe
from .beat_jitter import BeatJitter
from .cell_failures import RETRYABLE_ERRORS, CellFailures, worker_failed
from .engine_reply import turn_signal
from .liveness import SilenceWatch
from .output import OutputRelay
from .run_settings import RunSettings
from .stall_check import StallCheck
from .worker_calls import WorkerCalls
from .write_wait import let_write_end

__all__ = ["CellWatch", "RunResult", "RETRYABLE_ERRORS", "dead_ranks"]

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
    _failures: CellFailures = field(init=False, repr=False)
    _silence: SilenceWatch = field(init=False, repr=False)
    _stalls: StallCheck = field(init=False, repr=False)
    _published: list[dict] = field(init=False, repr=False)   # per rank: ipyparallel's metadata
    _next_look: float = field(init=False, repr=False)   # when the watch next looks for the dead
    _raised: tuple[int, BaseException] | None = field(init=False, repr=False)  # the first error
    _grace_ends: float = field(init=False, repr=False)   # when the others' grace after it ends
    _turn: threading.Event | None = field(init=False, repr=False)   # wakes the watch early

    def __post_init__(self) -> None:
        settings = self.settings
        self.relay = OutputRelay(len(self.workers), all_output=settings.all_output,
                                 stdout=settings.stdout, stderr=settings.stderr)
        self._failures = CellFailures(self.group, self.workers)   # its OOM count: before the cell

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
        # (read once: each reply's metadata grows as the messages come).
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
        self.calls.forget_ended()
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
        self._begin_watch(futures)
        try:
            while True:
                # The first look after a turn: just sent, there is nothing to see yet (a
                # trivial cell takes in its ranks once, at the end, not three times).
                _wait_a_turn(self._turn, futures)
                if all(f.done() for f in futures):
                    self._end(futures)
                    return
                self._look(futures)
                self._check_time(futures, deadline, timeout)
        except KeyboardInterrupt:
            # What arrived while the loop waited (a fit's record after its last epoch, the
            # last output) is taken in first: the interrupted run's record keeps it.
            self._take_in(futures)
            raise worker_failed("interrupted: training was stopped on every worker",
                                kind="interrupt") from None

    def _begin_watch(self, futures) -> None:
        size = len(futures)
        self._turn = turn_signal(futures)
        self._next_look = time.monotonic() + POLL_SECONDS
        self._silence = SilenceWatch(size, self.silence, jitter=self.jitter)
        self._stalls = StallCheck(size, self.settings, self._failures.describe)
        self._raised, self._grace_ends = None, 0.0

    def _look(self, futures) -> None:
        """One look at every rank: what it sent, then whether it went silent, stalled,
        raised or died."""
        self._take_in(futures)
        self._check_heard_from(futures)
        self._stalls.check([rank for rank, future in enumerate(futures) if not future.done()])
        self._note_first_error(futures)
        self._check_dead(futures)

    def _end(self, futures) -> None:
        """Every rank replied: what they sent last, then the first error, if one failed."""
        self._drain(futures)
        self._note_first_error(futures)
        if self._raised is not None:
            raise self._failures.raised(*self._raised, futures, all_finished=True)

    def _note_first_error(self, futures) -> None:
        if self._raised is None:
            first = next((r for r, f in enumerate(futures) if f.done() and f.exception()), None)
            if first is not None:
                self._raised = self._first_error(first, futures)
                self._grace_ends = time.monotonic() + self.error_grace

    def _check_time(self, futures, deadline: float | None, timeout: float | None) -> None:
        """The others' grace after the first error, then the cell's --timeout."""
        if self._raised is not None and time.monotonic() > self._grace_ends:
            raise self._failures.raised(*self._raised, futures, all_finished=False)
        if deadline is not None and time.monotonic() > deadline:
            raise worker_failed(f"the cell ran past `timeout={timeout:g}` s; every "
                                "worker was stopped", kind="timeout")

    def _check_dead(self, futures) -> None:
        """Ranks still running whose engine is gone, at most every POLL_SECONDS (a look reads
        each /proc entry, and each rank's reply is a loop turn: 8 ms a cell at N = 8)."""
        if time.monotonic() < self._next_look:
            return
        self._next_look = time.monotonic() + POLL_SECONDS
        dead = self.dead_ranks([r for r, f in enumerate(futures) if not f.done()])
        if dead:
            raise self._failures.died(dead)

    def _take_in(self, futures) -> None:
        published = self._published
        self.relay.poll(lambda r: (published[r]["stdout"] or "", published[r]["stderr"] or ""),
                        len(futures))
        for rank, md in enumerate(published):
            self._silence.see(rank, md["data"])
            silent_for = self._silence.quiet_for(rank) if self._silence.busy(rank) else None
            self._stalls.see(rank, md, silent_for)
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
            raise self._failures.controller_gone(quiet)
        verdicts = dict(zip(silent, worker_probe.judge_all([self.workers[r] for r in silent])))
        for rank in (rank for rank, verdict in verdicts.items() if verdict == "busy"):
            self._silence.vouch(rank)
        lost = [rank for rank, verdict in verdicts.items() if verdict in ("stopped", "unreachable")]
        if lost:
            raise self._failures.lost(lost, verdicts, self._silence.quiet_for(lost[0]))
        gone = [rank for rank, verdict in verdicts.items() if verdict == "gone"]
        if gone:
            # Their hosts answer but refuse the workers' TensorFlow ports: the processes
            # are gone (a cancelled batch job, say), the hosts are not cut off.
            raise self._failures.died(gone)

    def _first_error(self, rank: int, futures) -> tuple[int, BaseException]:
        """Show the first failing rank's traceback at once; remember it."""
        exc = futures[rank].exception()
        if is_engine_death(exc):
            raise self._failures.died([rank])
        self._take_in(futures)
        text = remote_traceback(exc)
        if text:
            stream = self.settings.stderr or sys.stderr
            stream.write(headed(text, rank, remote_summary(exc)))
            stream.flush()
        return rank, exc

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


def _wait_a_turn(turn: threading.Event | None, futures) -> None:
    """Until a rank fails, the last one ends, or POLL_SECONDS pass (output, data and
    silence are looked at as often): not at each reply (turn_signal). With replies that
    cannot say: on a rank still running (a finished one's wait returns at once, and the
    loop would spin on a core the last rank needs)."""
    if turn is not None:
        turn.wait(POLL_SECONDS)
        turn.clear()   # what set it is seen by the look that follows
        return
    running = next((f for f in futures if not f.done()), None)
    if running is not None:
        running.wait(POLL_SECONDS)


def dead_ranks(group: EngineGroup, workers: list[EngineReport],
               ranks: list[int] | None = None) -> list[int]:
    """Of `ranks` (all by default), those whose engine left the hub, or (on this host)
    whose process is gone."""
    registered = group.registered()
    return [rank for rank in (range(len(workers)) if ranks is None else ranks)
            if workers[rank].engine_id not in registered
            or (is_this_host(workers[rank].host) and not pid_alive(workers[rank].pid))]
