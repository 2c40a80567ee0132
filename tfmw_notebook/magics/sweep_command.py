"""`%%tfdist --sweep NAME=VALUES ...`: the cell once per combination, on the same workers.

Thin: the plan and the trials' rules are the cluster layer's (cluster/sweep.py); each
trial is the cell run once by `CellCommand._run_cell`, as any cell (dashboard,
checkpoints, recovery after a failure), after its values were bound on every worker.
Each trial keeps its own dashboard under the sweep's table: the curves of a trial
are what one looks at to see why it was pruned or failed.
"""

from __future__ import annotations

import copy
import os
import sys

from IPython.core.error import UsageError

from ..cluster.sweep import SweepPlan, SweepResult, SweepRunner, Trial
from ..cluster.sweep_trials import trial_directory
from ..errors import WorkerFailed
from ..protocol.run_options import TrialMonitor
from ..widgets.sweep_table import SweepTable
from . import cell_options

SWEEP_ONLY = ("trials", "seed", "prune")


def is_sweep(args) -> bool:
    return bool(args.sweep) or any(getattr(args, name) is not None for name in SWEEP_ONLY)


def run_sweep(command, args, cell: str) -> SweepResult:
    """Run the sweep `args` ask for; `command` is the CellCommand (its `_run_cell`)."""
    if not args.sweep:
        given = next(name for name in SWEEP_ONLY if getattr(args, name) is not None)
        raise UsageError(f"--{given} belongs to a sweep: add --sweep NAME=V1,V2,... "
                         "(or drop it)")
    if not cell.strip():
        raise UsageError("the %%tfdist cell is empty: write the code each trial runs below "
                         "the %%tfdist line")
    try:
        plan = SweepPlan.make(args.sweep, trials=args.trials, seed=args.seed,
                              prune=args.prune, monitor=args.monitor, mode=args.monitor_mode)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    cluster = command._require_cluster()
    if args.resume_from is None and command.session.resume_next:
        # The picker's "resume from" holds for every trial, not only the first.
        args = copy.copy(args)
        args.resume_from = command.session.resume_next
    run_dir = _sweep_directory(command, args)
    caption = f"sweep of {len(plan.combinations)} trials" + (
        f" (seed {plan.seed})" if plan.seed is not None else "")
    table = SweepTable(rich=getattr(command.shell, "kernel", None) is not None,
                       caption=caption)

    def run_trial(trial: Trial, monitor: TrialMonitor) -> dict:
        command._guarded(lambda: cluster.push(dict(trial.values)))
        trial_args = copy.copy(args)
        trial_args.trial_monitor = monitor
        trial_args.checkpoint_dir = trial.checkpoint_dir or args.checkpoint_dir
        base_name = getattr(args, "name", None)
        try:
            command._run_cell(trial_args, cell, run_name=f"{base_name}-trial-{trial.number}"
                              if base_name else None, sweep=dict(trial.values))
        except WorkerFailed as failure:   # the sweep goes on: say what was done, and hints
            _tell(f"trial {trial.number}: {failure}", *failure.hints)
            raise
        return command._guarded(cluster.trial_report)

    runner = SweepRunner(plan, run_trial, on_change=lambda result: _show(table, result),
                         checkpoint_dir=lambda number: trial_directory(run_dir, number))
    result = runner.run()
    _show(table, result, footer=result.summary())
    return result


def _tell(*lines: str) -> None:
    sys.stderr.write("".join(f"tfdist: {line}\n" for line in lines))
    sys.stderr.flush()


def _sweep_directory(command, args) -> str | None:
    """The base of the trials' run directories (RUN-trial-N), when they save any."""
    saving = command.session.preferences.checkpointing and not args.no_checkpoint
    if not (saving or args.max_restarts):
        return None
    return cell_options.run_directory(args.checkpoint_dir, cwd=os.getcwd())


def _show(table: SweepTable, result: SweepResult, footer: str = "") -> None:
    metric = next((t.metric for t in result.trials if t.metric), result.plan.monitor)
    table.update(result.records(), metric, footer=footer)
