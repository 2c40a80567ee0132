"""After a cell failed: keep the workers, or restart them and give their state back.

The rule: keep them when every worker finished the cell (each raised or
returned), none died, no error says a peer or a collective failed, the workers'
collective counters agree and a test all-reduce succeeds. Otherwise restart the
group and replay the logged cells (state_log.py), each fit() restoring the state
it ended with instead of training again.
"""

from __future__ import annotations

import io
import sys
import time
from typing import Any, Protocol

from .cell_watch import CellFault, RunResult
from .errors import ClusterSetupError, TFDistError, WorkerFailed
from .run_options import CellOptions, FitState
from .state_log import LoggedStep, RestoreReport, StateLog
from .tfconfig import EngineReport

_PROBE_SECONDS = 10.0  # the test all-reduce's own collective timeout
_COLLECTIVES = "tfmw_notebook.worker.collectives"


class WorkerGroup(Protocol):
    """What recovery needs of the cluster (TFCluster provides it)."""

    workers: list[EngineReport]
    last_restart_seconds: float
    last_restore: RestoreReport | None

    @property
    def state_log(self) -> StateLog: ...
    def call_each(self, ids, module: str, function: str, args_per_engine, *, what: str,
                  timeout: float | None = None) -> list: ...
    def run_once(self, source: str, *, options: CellOptions, state: FitState,
                 want_display: bool, timeout: float | None, all_output: bool = False,
                 stdout: Any = None, stderr: Any = None, on_data: Any = None) -> RunResult: ...
    def push(self, namespace: dict[str, Any]) -> None: ...
    def replace_workers(self) -> None: ...
    def stop_workers(self) -> None: ...
    def forget_state(self) -> None: ...


class Recovery:
    def __init__(self, cluster: WorkerGroup):
        self.cluster = cluster

    def recover(self, fault: CellFault, *, replay: bool) -> WorkerFailed:
        """The WorkerFailed to raise, after keeping or replacing the workers."""
        details = dict(rank=fault.rank, traceback=fault.traceback, reason=fault.reason,
                       detected_at=time.monotonic(), retryable=fault.retryable,
                       summary=fault.message, error_name=fault.error_name,
                       error_value=fault.error_value)
        if fault.reason == "controller":
            # Nothing can be restarted through a controller that is gone.
            return WorkerFailed(f"{fault.message}. Start the controller and engines again, "
                                "then `%tfdist attach` (or `%tfdist stop` and `%tfdist start` "
                                "for a cluster tfdist started)", **details)
        if fault.lost_hosts:
            # A host that cannot be reached cannot get new engines now: stop, and say when
            # to restart, rather than wait for launchers that cannot get through.
            self.cluster.stop_workers()
            hosts = ", ".join(fault.lost_hosts)
            return WorkerFailed(f"{fault.message}. Every worker was stopped; when {hosts} can "
                                "be reached again, run `%tfdist restart` (fresh workers; engines "
                                "started by hand: start them there again, then `%tfdist "
                                "attach`)", **details)
        why_restart = ""
        if fault.all_finished and not fault.retryable:
            why_restart = self.why_not_keep()
            if not why_restart:
                return WorkerFailed(
                    f"{fault.message}. Every worker finished the cell, so the workers were "
                    "kept: names from earlier cells are still defined", kept=True, **details)
            why_restart = f" ({why_restart})"
        notice(f"tfdist: {fault.message}; restarting the workers{why_restart}...")
        cluster = self.cluster
        log = cluster.state_log.snapshot()
        try:
            cluster.replace_workers()
        except TFDistError as exc:
            return WorkerFailed(f"{fault.message}; the workers could not be restarted: {exc}",
                                **details)
        restarted = f"The workers were restarted in {cluster.last_restart_seconds:.1f} s"
        if not (replay and log):
            cluster.forget_state()
            return WorkerFailed(f"{fault.message}. {restarted}: their variables were reset, run "
                                "the cells that define them again", recovered=True, **details)
        report = self.restore(log)
        return WorkerFailed(f"{fault.message}. {restarted} and {report.line()}",
                            recovered=True, restored=report.line(), **details)

    def why_not_keep(self) -> str:
        """Empty if the workers can go on together; else why they cannot."""
        cluster = self.cluster
        ids = [w.engine_id for w in cluster.workers]
        try:
            positions = cluster.call_each(ids, _COLLECTIVES, "position", [()] * len(ids),
                                          what="collective check", timeout=_PROBE_SECONDS)
            if any(position != positions[0] for position in positions):
                return "the workers ran different numbers of collectives"
            cluster.call_each(ids, _COLLECTIVES, "probe", [(_PROBE_SECONDS,)] * len(ids),
                              what="test all-reduce", timeout=_PROBE_SECONDS + 5)
        except ClusterSetupError as exc:
            return str(exc)
        return ""

    def restore(self, log: list[LoggedStep]) -> RestoreReport:
        """Replay the logged pushes and cells on fresh workers, quietly and in order.

        Each replayed fit() gives back the state it ended with (worker/fit_state.py)
        and returns its History; a fit with no saved state trains again. A
        replayed cell that fails ends the restore there.
        """
        cluster = self.cluster
        began = time.perf_counter()
        report = RestoreReport()
        quiet = io.StringIO()
        for step in log:
            if step.kind == "push":
                cluster.push(step.payload)
                continue
            state = FitState(replay=tuple(fit.for_worker() for fit in step.fits))
            try:
                cluster.run_once(step.payload, options=CellOptions(quiet_progress=True),
                                 state=state, want_display=False, timeout=None,
                                 stdout=quiet, stderr=quiet)
            except CellFault as fault:
                report.failed_cell, report.error = report.cells + 1, fault.message
                if not fault.all_finished or fault.retryable:
                    cluster.replace_workers()  # stuck or dead: fresh, without the rest
                break
            cluster.state_log.add(step)
            report.cells += 1
            report.fits_restored += sum(1 for fit in step.fits if fit.source)
            report.fits_rerun += sum(1 for fit in step.fits if not fit.source)
        report.seconds = time.perf_counter() - began
        cluster.last_restore = report
        info(f"tfdist: {report.line()}")
        return report


def notice(text: str) -> None:
    """Something went wrong and is being dealt with: stderr (shown as a warning)."""
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def info(text: str) -> None:
    """All is well, for the record: stdout (front ends show stderr in red, as an error)."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()
