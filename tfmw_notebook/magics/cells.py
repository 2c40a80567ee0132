"""`%%tfdist`: run the cell on every worker, with the live dashboard and --push/--out."""

from __future__ import annotations

import os
import sys

from IPython.core.error import UsageError

from ..cluster.cells.cell_syntax import CellSource, checked_source, magics_called
from ..cluster.cells.run_settings import RunSettings
from ..cluster.runs import tracking
from ..cluster.runs.run_capture import CellRuns, FitCapture, cluster_facts
from ..cluster.tfcluster import RemoteValue, TFCluster
from ..errors import TFDistError, WorkerFailed, remote_summary
from ..protocol import checkpoints, records
from ..protocol.run_options import StallLimits
from . import cell_options, sweep_command
from .base import CommandBase
from .hints import (
    cross_replica_step_hint,
    keras2_code_hint,
    missing_name_hint,
    mixed_keras_hint,
    no_scope_hint,
    private_network_hint,
    unshared_hosts_hint,
)


class CellCommand(CommandBase):

    def _cell(self, args, cell: str):
        if sweep_command.is_sweep(args):
            return sweep_command.run_sweep(self, args, cell)
        return self._run_cell(args, cell)

    def _run_cell(self, args, cell: str, *, run_name: str | None = None,
                  sweep: dict | None = None):
        """Run the cell once on every worker; each fit() it calls becomes a run record,
        named `run_name` (else --name, else the next run-N) with these `sweep` values.
        Returns the cell's result (the chief's last value, or None)."""
        if not cell.strip():
            raise UsageError("the %%tfdist cell is empty: write the code to run on every "
                             "worker below the %%tfdist line")
        cluster = self._require_cluster()
        source = self._guarded(lambda: checked_source(cell))
        self._check_magics(cluster, source.python)
        name = self._run_name(args, run_name)
        pushed = self._collect_push(args.push)
        sharded = self._collect_shard(args.shard, args.push)
        options, run_dir = self._cell_options(args, name)
        # Each refusal comes before anything reaches the workers: the shard's values are
        # checked as they are split, the pushed ones were checked above.
        if sharded:
            self._guarded(lambda: cluster.shard(sharded))
        if pushed:
            self._guarded(lambda: cluster.push(pushed))
        live = _live_run(self.shell, cluster) if options.report else None
        runs = CellRuns(root=_runs_root(), run_dir=run_dir, name=name, source=cell,
                        sweep=dict(sweep or {}), resumed=options.resume_from is not None,
                        capture=FitCapture(live.on_data if live is not None else None),
                        cluster=cluster_facts(cluster), restarts_before=cluster.restarts)
        settings = RunSettings(
            timeout=args.timeout, all_output=args.all_output, options=options,
            max_restarts=args.max_restarts, restore=False if args.no_restore else None,
            stall=StallLimits(args.stall_warning, args.stall_timeout), scope=not args.no_scope,
            on_data=runs.capture.on_data,
            on_stall=live.on_stall if live is not None else None)
        result = self._run_recorded(cluster, source, settings, live, runs)
        if args.out:
            self._copy_out(cluster, args.out)
        return RemoteValue(result.display) if result.display is not None else None

    def _run_name(self, args, run_name: str | None) -> str | None:
        """The name asked for (a sweep's, else --name), checked before anything runs."""
        name = run_name if run_name is not None else args.name
        if name is None:
            return None
        if args.checkpoint_dir:
            raise UsageError(f"--name {name} and --checkpoint-dir both choose the run's "
                             "directory: give one of them; nothing was run")
        problem = records.name_problem(name, _runs_root())
        if problem:
            raise UsageError(f"{problem}; nothing was run")
        return name

    def _run_recorded(self, cluster: TFCluster, source: CellSource, settings: RunSettings,
                      live, runs: CellRuns):
        """Run the cell, then write its fits' records however it ended."""
        result, error = None, None
        try:
            result = self._run_watched(cluster, source, settings, live, runs.run_dir)
            return result
        except BaseException as exc:
            error = exc
            raise
        finally:
            if cluster.resized is not None and cluster.workers:
                runs.cluster = cluster_facts(cluster)   # shrunk mid-cell: where it ended
            try:
                written = runs.write(cluster.restarts,
                                     result.runs if result is not None else None, error)
            except OSError as exc:   # the training's outcome matters more than its record
                print(f"tfdist: could not write the run record: {exc}", file=sys.stderr)
                written = []
            if written:
                cluster.resized = None   # noted by these records
            self._track(written)

    def _track(self, run_dirs: list[str]) -> None:
        """`%tfdist tracking`: each record just written goes to the tracker too."""
        for run_dir in run_dirs:
            record = records.read_record(run_dir)
            if record is not None:
                tracking.after_record(self.session.tracking, record)

    def _cell_options(self, args, name: str | None = None):
        session, preferences = self.session, self.session.preferences
        try:
            options, run_dir = cell_options.build(
                args, dashboard=preferences.dashboard, checkpointing=preferences.checkpointing,
                resume_next=session.resume_next, cwd=os.getcwd(), name=name)
        except ValueError as exc:  # no checkpoint to resume from, a bad option value
            raise UsageError(str(exc)) from None
        if options.tensorboard and options.tensorboard not in session.tensorboard_dirs:
            session.tensorboard_dirs.append(options.tensorboard)
        return options, run_dir

    def _run_watched(self, cluster: TFCluster, cell: CellSource, settings: RunSettings, live,
                     run_dir: str | None):
        session = self.session
        try:
            result = self._guarded(lambda: cluster.run(cell, settings))
            session.resume_next = None
            return result
        except WorkerFailed as failure:
            hint = (missing_name_hint(failure.error_name, failure.error_value, self.shell.user_ns)
                    or unshared_hosts_hint(failure.error_name, failure.error_value,
                                           [w.host for w in cluster.workers])
                    or private_network_hint(failure.error_value, cluster.in_private_network)
                    or no_scope_hint(failure.error_value)
                    or cross_replica_step_hint(failure.error_value)
                    or mixed_keras_hint(failure.error_name, failure.error_value)
                    or keras2_code_hint(failure.error_name, failure.error_value, cluster.keras))
            if hint:
                failure.add_hint(hint)
            raise
        finally:
            if run_dir and os.path.isdir(run_dir):
                session.last_run = run_dir
            if live is not None:
                live.finish()
                if live.store.ranks:
                    session.history = live.store

    def _check_magics(self, cluster: TFCluster, source: str) -> None:
        called = magics_called(source)
        if not called:
            return
        missing = self._guarded(lambda: cluster.missing_magics(called))
        if missing:
            names = ", ".join(f"`{name}`" for name in missing)
            raise UsageError(f"{names} {'is' if len(missing) == 1 else 'are'} a magic of this "
                             "notebook, not of the workers: run it in a cell without %%tfdist; "
                             "nothing was sent to the workers")

    def _collect_push(self, names: list[str]) -> dict:
        from ipyparallel.serialize import serialize_object

        namespace = self.shell.user_ns
        values = {}
        for name in names:
            if name not in namespace:
                raise UsageError(f"--push {name}: the notebook has no variable named {name!r}; "
                                 "define it first or check the spelling")
            try:
                serialize_object(namespace[name])
            except Exception as exc:
                raise UsageError(
                    f"--push {name}: it cannot be sent to the workers "
                    f"({type(exc).__name__}: {exc}); push the data it is made from instead"
                ) from None
            values[name] = namespace[name]
        return values

    def _collect_shard(self, names: list[str], pushed: list[str]) -> dict:
        namespace = self.shell.user_ns
        for name in names:
            if name not in namespace:
                raise UsageError(f"--shard {name}: the notebook has no variable named "
                                 f"{name!r}; define it first or check the spelling")
            if name in pushed:
                raise UsageError(f"--shard {name} and --push {name}: a variable is either "
                                 "split over the workers or sent whole to each; choose one")
        return {name: namespace[name] for name in dict.fromkeys(names)}

    def _copy_out(self, cluster: TFCluster, names: list[str]) -> None:
        missing = self._guarded(lambda: cluster.missing_on_chief(names))
        if missing:
            raise UsageError(
                f"--out {' '.join(missing)}: the chief has no variable named "
                f"{missing[0]!r} after the cell ran; assign it in the cell or drop --out")
        try:
            values = cluster.pull(names)
        except Exception as exc:
            summary = remote_summary(exc)
            if not _is_serialization_error(exc):
                raise TFDistError(f"--out {' '.join(names)}: could not copy it from the "
                                  f"chief: {summary}") from None
            raise UsageError(
                f"--out {' '.join(names)}: it cannot be sent from the chief ({summary}); "
                "copy plain data (numbers, arrays, weights) instead") from None
        self.shell.user_ns.update(values)


def _is_serialization_error(exc: BaseException) -> bool:
    name = getattr(exc, "ename", "") or type(exc).__name__
    text = str(getattr(exc, "evalue", "") or exc).lower()
    return name in ("PicklingError", "TypeError", "AttributeError") or "pickl" in text


def _runs_root() -> str:
    """Where run records live: ./tfdist_checkpoints of the notebook's directory."""
    return os.path.abspath(checkpoints.DEFAULT_ROOT)


def _live_run(shell, cluster: TFCluster):
    """The cell's live view of its workers' training: the dashboard's widgets where
    `shell` has a kernel, text elsewhere (widgets/live.py)."""
    from ..widgets.live import LiveRun

    return LiveRun(widgets=getattr(shell, "kernel", None) is not None,
                   host_of=lambda rank: host_of_rank(cluster, rank))


def host_of_rank(cluster: TFCluster, rank: int) -> str:
    """The host of the worker of this rank now (after a restart, of the new one)."""
    workers = cluster.workers
    return workers[rank].host if 0 <= rank < len(workers) else "unknown host"
