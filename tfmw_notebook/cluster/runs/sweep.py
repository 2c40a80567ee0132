"""A sweep on the warm workers: the same cell once per combination, on the same processes.

`SweepPlan.make` checks everything before anything runs (sweep_space.py);
`SweepRunner` runs the trials through a `run_trial` the caller gives (the magic or
`TFCluster.sweep`), so this module never touches the workers itself. A trial ends
as completed, pruned (its fit was stopped by the median rule, median_rule.py),
failed or interrupted; a failure or an interrupt ends that trial only, the workers
being kept or restored as after any failed cell. The sweep ends early when the
workers are lost, when something other than a trial's cell fails, or when the user
interrupts again within the trial (a press held while the workers restart counts:
interrupt_hold.py) or the `interrupt_grace` seconds after it.
"""

from __future__ import annotations

import os
import random
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...errors import WorkerFailed
from ...protocol import checkpoints
from ...protocol.run_options import MONITOR_MODES, TrialMonitor, is_worse
from ..cells.interrupt_hold import presses_held
from . import median_rule, sweep_space

INTERRUPT_GRACE = 3.0   # seconds after an interrupted trial in which another ends the sweep
PRUNE_RULES = ("median",)
OUTCOMES = ("running", "completed", "pruned", "failed", "interrupted")


@dataclass
class Trial:
    """One combination's run: `values` bound on every worker, what its last fit saw."""

    number: int
    values: dict[str, Any]
    outcome: str = "running"
    metric: str | None = None      # the metric read (the monitor, or loss for val_loss)
    history: list[float] = field(default_factory=list)   # per epoch, mean over workers
    pruned_at: int | None = None   # epochs done when it was stopped
    checkpoint_dir: str | None = None
    error: str = ""
    seconds: float = 0.0

    def final(self) -> float | None:
        return self.history[-1] if self.history else None

    def best(self, mode: str) -> float | None:
        finite = [v for v in self.history if v == v]
        if not finite:
            return None
        return min(finite) if mode == "min" else max(finite)

    def record(self, mode: str) -> dict[str, Any]:
        return {"trial": self.number, "values": dict(self.values), "outcome": self.outcome,
                "metric": self.metric, "history": list(self.history),
                "final": self.final(), "best": self.best(mode), "pruned_at": self.pruned_at,
                "checkpoint_dir": self.checkpoint_dir, "error": self.error,
                "seconds": round(self.seconds, 3)}


@dataclass(frozen=True)
class SweepPlan:
    combinations: tuple[dict[str, Any], ...]
    monitor: str = "val_loss"
    mode: str = "min"
    prune: str | None = None
    seed: int | None = None          # None: a grid

    @classmethod
    def make(cls, space: Sequence[str] | Mapping[str, Any], *, trials: int | None = None,
             seed: int | None = None, prune: str | None = None,
             monitor: str | None = "val_loss", mode: str = "auto") -> SweepPlan:
        """Checked, or ValueError (one line). Sampled without a seed: one is drawn (and
        kept in the plan, so the sweep can be repeated)."""
        if prune is not None and prune not in PRUNE_RULES:
            raise ValueError(f"--prune {prune}: the rules are {', '.join(PRUNE_RULES)}")
        if prune is not None and not monitor:
            raise ValueError("--prune needs a metric to compare: --monitor NAME "
                             "(e.g. val_loss)")
        if mode not in MONITOR_MODES:
            raise ValueError(f"--monitor-mode {mode}: expected auto, min or max")
        if mode == "auto":   # as --keep-best decides: Keras' ModelCheckpoint's rule
            mode = checkpoints.monitor_mode(monitor or "val_loss")
        dims = sweep_space.dimensions(space)
        if trials is not None and seed is None:
            seed = random.SystemRandom().randrange(1 << 31)
        combinations = sweep_space.plan(dims, trials=trials, seed=seed)
        return cls(tuple(combinations), monitor or "val_loss", mode, prune,
                   seed if trials is not None else None)

    def monitor_for(self, done: Sequence[Trial]) -> TrialMonitor:
        """What the next trial's fits get: the metric to keep, and the thresholds."""
        thresholds: tuple[float | None, ...] = ()
        if self.prune == "median":
            thresholds = median_rule.thresholds(
                [t.history for t in done if t.outcome in ("completed", "pruned")])
        return TrialMonitor(self.monitor, self.mode, thresholds,
                            fallback="loss" if self.monitor == "val_loss" else None)


@dataclass
class SweepResult:
    """Every trial the sweep started, in order, and why it ended early ("" if it did not)."""

    plan: SweepPlan
    trials: list[Trial] = field(default_factory=list)
    ended: str = ""

    def best(self) -> Trial | None:
        """The completed trial with the best final value (pruned ones stopped early)."""
        best, best_value = None, 0.0
        for trial in self.trials:
            value = trial.final()
            if trial.outcome != "completed" or value is None or value != value:
                continue
            if best is None or is_worse(best_value, value, self.plan.mode):
                best, best_value = trial, value
        return best

    def records(self) -> list[dict[str, Any]]:
        return [trial.record(self.plan.mode) for trial in self.trials]

    def counts(self) -> dict[str, int]:
        found = {outcome: 0 for outcome in OUTCOMES}
        for trial in self.trials:
            found[trial.outcome] += 1
        return {outcome: n for outcome, n in found.items() if n}

    def summary(self) -> str:
        counted = ", ".join(f"{n} {outcome}" for outcome, n in self.counts().items())
        line = f"{len(self.trials)} of {len(self.plan.combinations)} trials: {counted}"
        if self.plan.seed is not None:
            line += f"; seed {self.plan.seed}"
        best = self.best()
        if best is not None:
            line += (f"; best: trial {best.number} ({format_values(best.values)}), "
                     f"{best.metric} {best.final():.4g}")
            if best.checkpoint_dir:
                line += f", checkpoints in {best.checkpoint_dir}"
        if self.ended:
            line += f"; ended early: {self.ended}"
        return line

    def __repr__(self) -> str:
        return f"<SweepResult {self.summary()}>"


def format_values(values: Mapping[str, Any]) -> str:
    return ", ".join(f"{name}={value:.4g}" if isinstance(value, float) else f"{name}={value}"
                     for name, value in values.items())


RunTrial = Callable[[Trial, TrialMonitor], dict]


@dataclass
class SweepRunner:
    """Runs `plan`'s trials through `run_trial(trial, monitor) -> trial report` (the
    workers' trial_report: metric, values, pruned_at), calling `on_change(result)`
    whenever a trial starts or ends."""

    plan: SweepPlan
    run_trial: RunTrial
    on_change: Callable[[SweepResult], None] = lambda result: None
    interrupt_grace: float = INTERRUPT_GRACE
    checkpoint_dir: Callable[[int], str | None] = lambda number: None
    _told_metric: bool = field(default=False, init=False)

    def run(self) -> SweepResult:
        result = SweepResult(self.plan)
        for number, values in enumerate(self.plan.combinations, start=1):
            trial = Trial(number, dict(values), checkpoint_dir=self.checkpoint_dir(number))
            result.trials.append(trial)
            self.on_change(result)
            began = time.monotonic()
            try:
                self._one(trial, result)
            finally:
                trial.seconds = time.monotonic() - began
                if trial.checkpoint_dir and not os.path.isdir(trial.checkpoint_dir):
                    trial.checkpoint_dir = None   # it saved nothing
                self.on_change(result)
            if (trial.outcome == "interrupted" and not result.ended
                    and number < len(self.plan.combinations)):
                result.ended = self._interrupted_again(trial)
            if result.ended:
                break
        return result

    def _one(self, trial: Trial, result: SweepResult) -> None:
        held = presses_held()
        try:
            report = self.run_trial(trial, self.plan.monitor_for(result.trials[:-1]))
        except WorkerFailed as failure:
            interrupted = failure.reason == "interrupt"
            trial.outcome, trial.error = ("interrupted" if interrupted else "failed",
                                          failure.summary)
            if not (failure.kept or failure.recovered):
                result.ended = f"the workers were lost after trial {trial.number}"
            elif presses_held() > held:   # pressed again while the workers came back
                result.ended = f"interrupted twice during trial {trial.number}"
            return
        except KeyboardInterrupt:   # a second interrupt, or one outside the training
            trial.outcome, trial.error = "interrupted", "interrupted"
            result.ended = f"interrupted during trial {trial.number}"
            return
        except BaseException as exc:
            trial.outcome, trial.error = "failed", f"{type(exc).__name__}: {exc}"
            result.ended = f"trial {trial.number} could not run: {exc}"
            raise
        trial.metric = report.get("metric")
        if trial.metric is None and report.get("logged") and not self._told_metric:
            self._told_metric = True   # else --prune never prunes, the table stays empty
            sys.stderr.write(f"tfdist: the fits log no {self.plan.monitor!r} (they log "
                             f"{', '.join(report['logged'])}): --monitor names the metric "
                             "of the table and of --prune\n")
        trial.history = [float(v) for v in report.get("values") or []]
        trial.pruned_at = report.get("pruned_at")
        trial.outcome = "pruned" if trial.pruned_at else "completed"

    def _interrupted_again(self, trial: Trial) -> str:
        """After an interrupted trial: another interrupt within the grace ends the sweep."""
        sys.stderr.write(f"tfdist: trial {trial.number} was interrupted; the next starts in "
                         f"{self.interrupt_grace:g} s: interrupt again to end the sweep\n")
        sys.stderr.flush()
        deadline = time.monotonic() + self.interrupt_grace
        try:
            while time.monotonic() < deadline:
                time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))
        except KeyboardInterrupt:
            return f"interrupted twice (trial {trial.number} and after it)"
        return ""
