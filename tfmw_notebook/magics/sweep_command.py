"""`%%tfdist --sweep NAME=VALUES ...`: the cell once per combination, on the same workers.

Thin: the plan and the trials' rules are the cluster layer's (cluster/runs/sweep.py); each
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

from ..cluster.runs.sweep import SweepPlan, SweepResult, SweepRunner, Trial
from ..cluster.runs.sweep_trials import trial_directory
from ..errors import WorkerFailed
from ..protocol import checkpoints, records
from ..protocol.run_options import TrialMonitor
from ..widgets.sweep_table import SweepTable
from . import cell_options

SWEEP_ONLY = ("trials", "seed", "prune")


def is_sweep(args) -> bool:
    return bool(args.sweep) or any(getattr(args, name) is not None for name in SWEEP_ONLY)


def run_sweep(command, args, cell: str) -> SweepResult:
    """Run the sweep `args` ask for; `command` is the CellCommand (its `_run_cell`)."""
    plan = _checked_plan(args, cell)
    cluster = command._require_cluster()
    if args.resume_from is None and command.session.resume_next:
        # The picker's "resume from" holds for every trial, not only the first.
        args = copy.copy(args)
        args.resume_from = command.session.resume_next
    run_dir, base_name = _sweep_names(command, args, len(plan.combinations))
    caption = f"sweep of {len(plan.combinations)} trials" + (
        f" (seed {plan.seed})" if plan.seed is not None else "")
    table = SweepTable(rich=getattr(command.shell, "kernel", None) is not None,
                       caption=caption)

    def run_trial(trial: Trial, monitor: TrialMonitor) -> dict:
        command._guarded(lambda: cluster.push(dict(trial.values)))
        trial_args = copy.copy(args)
        trial_args.trial_monitor = monitor
        if base_name is None:   # --checkpoint-dir DIR: trial N saves into DIR-trial-N
            trial_args.checkpoint_dir = trial_directory(run_dir, trial.number)
        try:
            command._run_cell(trial_args, cell, run_name=f"{base_name}-trial-{trial.number}"
                              if base_name else None, sweep=dict(trial.values))
        except WorkerFailed as failure:   # the sweep goes on: say what was done, and hints
            _tell(f"trial {trial.number}: {failure}", *failure.hints)
            raise
        return command._guarded(cluster.trial_report)

    runner = SweepRunner(plan, run_trial, on_change=lambda result: _show(table, result),
                         checkpoint_dir=lambda number: trial_directory(run_dir, number)
                         if _saving(command, args) else None)
    result = runner.run()
    _show(table, result, footer=result.summary())
    return result


def _checked_plan(args, cell: str) -> SweepPlan:
    """The sweep's plan; a UsageError for a sweep's option without --sweep, an empty cell,
    or values the plan refuses."""
    if not args.sweep:
        given = next(name for name in SWEEP_ONLY if getattr(args, name) is not None)
        raise UsageError(f"--{given} belongs to a sweep: add --sweep NAME=V1,V2,... "
                         "(or drop it)")
    if not cell.strip():
        raise UsageError("the %%tfdist cell is empty: write the code each trial runs below "
                         "the %%tfdist line")
    try:
        return SweepPlan.make(args.sweep, trials=args.trials, seed=args.seed,
                              prune=args.prune, monitor=args.monitor, mode=args.monitor_mode)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _tell(*lines: str) -> None:
    sys.stderr.write("".join(f"tfdist: {line}\n" for line in lines))
    sys.stderr.flush()


def _saving(command, args) -> bool:
    """Whether the trials' run directories get checkpoints or backups."""
    return bool(command.session.preferences.checkpointing and not args.no_checkpoint
                or args.max_restarts)


def _sweep_names(command, args, trials: int) -> tuple[str, str | None]:
    """The base of the trials' run directories (RUN-trial-N), and the base of their run
    names (None with --checkpoint-dir: each trial's record is named after its directory).

    Each trial is a run named NAME-trial-N (NAME: --name, else the next run-N), checked
    for every trial before anything runs."""
    if args.checkpoint_dir:
        if getattr(args, "name", None):
            raise UsageError(f"--name {args.name} and --checkpoint-dir both choose the "
                             "trials' directories: give one of them; nothing was run")
        return cell_options.run_directory(args.checkpoint_dir, cwd=os.getcwd()), None
    root = os.path.abspath(checkpoints.DEFAULT_ROOT)
    base = getattr(args, "name", None) or records.next_run_name(root)
    for number in range(1, trials + 1):
        problem = records.name_problem(f"{base}-trial-{number}", root)
        if problem:
            raise UsageError(f"{problem}; nothing was run")
    return os.path.join(root, base), base


def _show(table: SweepTable, result: SweepResult, footer: str = "") -> None:
    metric = next((t.metric for t in result.trials if t.metric), result.plan.monitor)
    table.update(result.records(), metric, footer=footer)
