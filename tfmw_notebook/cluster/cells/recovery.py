"""After a cell failed: keep the workers, or restart them and give their state back.

The rule: keep them when every worker finished the cell (each raised or
returned), none died, no error says a peer or a collective failed, the workers'
collective counters agree and a test all-reduce succeeds. Otherwise restart the
group and replay the logged cells (state_log.py), each fit() restoring the state
it ended with instead of training again.
"""

from __future__ import annotations

import dataclasses
import io
import sys
import time
from collections.abc import Sequence
from typing import Any, Protocol

from ...errors import ClusterSetupError, Failure, TFDistError, WorkerFailed, for_caller
from ...protocol.run_options import CellOptions, FitState
from ...protocol.tfconfig import EngineReport
from .cell_watch import RunResult
from .interrupt_hold import one_interrupt_held
from .run_settings import RunSettings
from .shrink import placement, survivors
from .state_log import LoggedStep, RestoreReport, StateLog
from .worker_calls import WorkerCalls

_PROBE_SECONDS = 10.0  # the test all-reduce's own collective timeout


class WorkerGroup(Protocol):
    """What recovery needs of the cluster (TFCluster provides it)."""

    workers: list[EngineReport]
    last_restart_seconds: float
    last_restore: RestoreReport | None
    min_workers: int | None
    resized: tuple[int, int] | None

    @property
    def state_log(self) -> StateLog: ...
    @property
    def calls(self) -> WorkerCalls: ...
    def run_once(self, source: str, settings: RunSettings, state: FitState) -> RunResult: ...
    def push(self, namespace: dict[str, Any]) -> None: ...
    def deliver_shards(self, shard_set: Any) -> list[dict]: ...
    def replace_workers(self, size: int | None = None, place: dict[str, int] | None = None,
                        lost_hosts: Sequence[str] = ()) -> None: ...
    def stop_workers(self, lost_hosts: Sequence[str] = ()) -> None: ...
    def forget_state(self) -> None: ...


class Recovery:
    def __init__(self, cluster: WorkerGroup):
        self.cluster = cluster

    def recover(self, attempt: WorkerFailed, *, replay: bool) -> WorkerFailed:
        """The WorkerFailed to raise, after keeping or replacing the workers."""
        failure = attempt.failure
        if failure.kind == "controller":
            # Nothing can be restarted through a controller that is gone.
            return WorkerFailed(failure, f"{failure.summary}. Start the controller and engines "
                                "again, then `TFCluster.attach()` (or `cluster.stop()` and "
                                "`TFCluster.start()` for a cluster tfdist started)")
        if failure.lost_hosts:
            # A host that cannot be reached cannot get new engines now: go on with the
            # hosts left (--min-workers), or stop and say when to restart, rather than
            # wait for launchers that cannot get through.
            shrunk = self._shrunk(attempt, replay=replay)
            if shrunk is not None:
                return shrunk
            self.cluster.stop_workers(failure.lost_hosts)
            hosts = ", ".join(failure.lost_hosts)
            return WorkerFailed(failure, f"{failure.summary}. Every worker was stopped; when "
                                f"{hosts} can be reached again, run `cluster.restart()` (fresh "
                                "workers; engines started by hand: start them there again, "
                                "then `TFCluster.attach()`)")
        why_restart = ""
        if failure.all_finished and not failure.retryable:
            why_restart = self.why_not_keep()
            if not why_restart:
                return WorkerFailed(
                    failure, f"{failure.summary}. Every worker finished the cell, so the "
                    "workers were kept: names from earlier cells are still defined", kept=True)
            why_restart = f" ({why_restart})"
        notice(f"tfdist: {failure.summary}; restarting the workers{why_restart}...")
        return self._restarted(attempt, replay=replay)

    def _shrunk(self, attempt: WorkerFailed, *, replay: bool) -> WorkerFailed | None:
        """With a floor of workers set and enough workers on the hosts left: restart there
        (shrink.py); else None."""
        failure, cluster = attempt.failure, self.cluster
        left = survivors(cluster.workers, failure.lost_hosts)
        if not cluster.min_workers or len(left) < cluster.min_workers:
            return None
        before, hosts = len(cluster.workers), ", ".join(failure.lost_hosts)
        grow = f"once {hosts} can be reached, `cluster.resize(n={before})` grows it back"
        workers = f"{len(left)} workers" if len(left) > 1 else "1 worker"
        notice(f"tfdist: {failure.summary}; going on with the {workers} of the "
               f"hosts left (`min_workers={cluster.min_workers}`); {grow}...")
        log = cluster.state_log.snapshot()
        with one_interrupt_held("restarting the workers on the hosts left"):
            try:
                cluster.replace_workers(len(left), place=placement(left),
                                        lost_hosts=failure.lost_hosts)
            except TFDistError as exc:
                return WorkerFailed(failure, f"{failure.summary}; the workers could not be "
                                    f"restarted on the hosts left: {exc}")
        cluster.resized = (before, len(left))
        went_on = (f"Went on with {len(left)} of {before} workers "
                   f"(`min_workers={cluster.min_workers}`), restarted in "
                   f"{cluster.last_restart_seconds:.1f} s")
        # A lost host is not the cell's fault: --max-restarts may run it again.
        return self._given_back(dataclasses.replace(failure, retryable=True), went_on, log,
                                replay=replay, then=f"; {grow}")

    def _restarted(self, attempt: WorkerFailed, *, replay: bool) -> WorkerFailed:
        failure, cluster = attempt.failure, self.cluster
        log = cluster.state_log.snapshot()
        with one_interrupt_held("restarting the workers"):
            try:
                cluster.replace_workers()
            except TFDistError as exc:
                return WorkerFailed(failure, f"{failure.summary}; the workers could not be "
                                    f"restarted: {exc}")
        restarted = f"The workers were restarted in {cluster.last_restart_seconds:.1f} s"
        return self._given_back(failure, restarted, log, replay=replay)

    def _given_back(self, failure: Failure, restarted: str, log: list[LoggedStep], *,
                    replay: bool, then: str = "") -> WorkerFailed:
        """After a restart: the logged steps replayed on the fresh workers (or their
        variables reset), and the WorkerFailed that says so, `then` at its end."""
        if not (replay and log):
            self.cluster.forget_state()
            return WorkerFailed(failure, f"{failure.summary}. {restarted}: their variables were "
                                f"reset, run the cells that define them again{then}",
                                recovered=True)
        with one_interrupt_held("giving the fresh workers their state back"):
            report = self.restore(log)
        return WorkerFailed(failure, f"{failure.summary}. {restarted} and {report.line()}{then}",
                            recovered=True, restored=report.line())

    def why_not_keep(self) -> str:
        """Empty if the workers can go on together; else why they cannot."""
        cluster = self.cluster
        ids = [w.engine_id for w in cluster.workers]
        try:
            positions = cluster.calls.collective_positions(ids, timeout=_PROBE_SECONDS)
            if any(position != positions[0] for position in positions):
                return "the workers ran different numbers of collectives"
            cluster.calls.collective_probe(ids, _PROBE_SECONDS, timeout=_PROBE_SECONDS + 5)
        except ClusterSetupError as exc:
            return str(exc)
        return ""

    def restore(self, log: list[LoggedStep], report: RestoreReport | None = None, *,
                announce: bool = True) -> RestoreReport:
        """Replay the logged pushes and cells on fresh workers, quietly and in order.

        Each replayed fit() gives back the state it ended with (worker/fits/fit_state.py)
        and returns its History; a fit with no saved state trains again. A
        replayed cell that fails ends the restore there. `report`: filled in (else a new
        one); `announce`: print its line (else the caller says it).
        """
        cluster = self.cluster
        began = time.perf_counter()
        report = report if report is not None else RestoreReport()
        quiet = io.StringIO()
        settings = RunSettings(options=CellOptions(quiet_progress=True), want_display=False,
                               stdout=quiet, stderr=quiet)
        for step in log:
            if step.kind == "push":
                cluster.push(step.payload)
                continue
            if step.kind == "shard":
                cluster.deliver_shards(step.payload)
                continue
            state = FitState(replay=tuple(fit.for_worker() for fit in step.fits))
            try:
                cluster.run_once(step.payload, settings, state)
            except WorkerFailed as failed:
                report.failed_cell, report.error = report.cells + 1, failed.summary
                if not failed.failure.all_finished or failed.retryable:
                    cluster.replace_workers()  # stuck or dead: fresh, without the rest
                break
            cluster.state_log.add(step)
            report.cells += 1
            report.fits_restored += sum(1 for fit in step.fits if fit.source)
            report.fits_rerun += sum(1 for fit in step.fits if not fit.source)
        report.seconds = time.perf_counter() - began
        cluster.last_restore = report
        if announce:
            info(f"tfdist: {report.line()}")
        return report


def notice(text: str) -> None:
    """Something went wrong and is being dealt with: stderr (shown as a warning)."""
    sys.stderr.write(for_caller(text) + "\n")
    sys.stderr.flush()


def info(text: str) -> None:
    """All is well, for the record: stdout (front ends show stderr in red, as an error)."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()
