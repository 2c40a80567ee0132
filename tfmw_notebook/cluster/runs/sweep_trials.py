"""`TFCluster.sweep` (a mixin of TFCluster), and how one of its trials runs: the values
bound on every worker, then the cell with its own checkpoint directory and the trial
monitor, then the chief's report. The rules of a sweep are sweep.py's."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Protocol

from ...errors import BadArgument
from ...protocol.run_options import CellOptions, TrialMonitor
from ..cells.run_settings import RunSettings
from .sweep import RunTrial, SweepPlan, SweepResult, SweepRunner, Trial


class SweepTarget(Protocol):
    """What a sweep needs of a cluster (TFCluster has it)."""

    def push(self, namespace: dict[str, Any]) -> None: ...

    def run(self, source: str, settings: RunSettings | None = None, **fields) -> Any: ...

    def trial_report(self) -> dict: ...

    def _require_workers(self) -> None: ...


def trial_directory(run_dir: str | None, number: int) -> str | None:
    """Each trial's checkpoints beside the others': RUN-trial-N (the picker lists them)."""
    return f"{run_dir.rstrip(os.sep)}-trial-{number}" if run_dir else None


def trial_options(options: CellOptions, monitor: TrialMonitor,
                  checkpoint_dir: str | None) -> CellOptions:
    """`options` for one trial: its monitor, and its own checkpoint and backup folders."""
    checkpoint, backup = options.checkpoint, options.backup
    if checkpoint is not None and checkpoint_dir:
        checkpoint = replace(checkpoint, run_dir=checkpoint_dir)
    if backup is not None and checkpoint_dir:
        backup = replace(backup, directory=os.path.join(checkpoint_dir, "backup"))
    return replace(options, trial=monitor, checkpoint=checkpoint, backup=backup)


def api_trials(cluster: SweepTarget, source: str, settings: RunSettings) -> RunTrial:
    """`run_trial` for the Python API: push the values, run the cell, read the report."""
    def run_trial(trial: Trial, monitor: TrialMonitor) -> dict:
        cluster.push(dict(trial.values))
        options = trial_options(settings.options, monitor, trial.checkpoint_dir)
        cluster.run(source, replace(settings, options=options))
        return cluster.trial_report()

    return run_trial


class Sweeps:
    """TFCluster's `sweep`."""

    def sweep(self: SweepTarget, source: str, space: dict, *, trials: int | None = None,
              seed: int | None = None, prune: str | None = None, monitor: str = "val_loss",
              mode: str = "auto", settings: RunSettings | None = None,
              on_change: Callable[[SweepResult], None] | None = None) -> SweepResult:
        """Run `source` once per combination of `space` ({name: [values]} for a grid, or
        {name: "loguniform:LOW:HIGH" | "uniform:LOW:HIGH"} with `trials` samples drawn
        with `seed`) on these workers, each name bound on every worker first (sweep.py).
        `prune="median"` stops a trial whose `monitor` is worse than the earlier trials'
        median at an epoch. A failed or interrupted trial ends alone. `settings` are each
        trial's (RunSettings); with checkpoints, trial N saves into RUN_DIR-trial-N.
        `on_change(result)` is called as trials start and end. Returns the SweepResult."""
        try:
            plan = SweepPlan.make(space, trials=trials, seed=seed, prune=prune,
                                  monitor=monitor, mode=mode)
        except ValueError as exc:
            raise BadArgument(str(exc)) from None
        settings = RunSettings() if settings is None else settings
        if not isinstance(settings, RunSettings):
            raise BadArgument(f"Invalid value for argument `settings`. Received: "
                              f"settings={settings!r}. Expected a RunSettings")
        self._require_workers()
        checkpoint = settings.options.checkpoint
        run_dir = checkpoint.run_dir if checkpoint is not None else None
        runner = SweepRunner(plan, api_trials(self, source, settings),
                             on_change=on_change or (lambda result: None),
                             checkpoint_dir=lambda number: trial_directory(run_dir, number))
        return runner.run()
