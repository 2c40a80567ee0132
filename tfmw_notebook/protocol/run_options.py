"""What a %%tfdist cell's Keras calls get: the contract between the notebook and the workers.

Pure and picklable: the magic builds these from its flags (cell_options.py), API
users construct them directly, and they travel to the workers as they are
(worker/fits/keras_hooks.py reads them). Each checks its values where it is made.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

MONITOR_MODES = ("auto", "min", "max")
# The shortest common notice before SIGKILL is 30 s (Slurm's default KillWait, a GCE spot
# VM's preemption, Kubernetes' default termination grace): 25 s leaves 5 s to write the
# backup and exit. A backup taken mid-epoch resumes at its step (input_position.py).
DEFAULT_GRACE: float | None = 25.0


def _invalid(name: str, value: Any, expected: str) -> ValueError:
    return ValueError(f"Invalid value for argument `{name}`. Received: {name}={value!r}. "
                      f"Expected {expected}")


def _whole(name: str, value: Any, *, minimum: int, optional: bool = False) -> None:
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        expected = f"an integer >= {minimum}" + (" or None" if optional else "")
        raise _invalid(name, value, expected)


def _path(name: str, value: Any, *, optional: bool = False) -> None:
    if optional and value is None:
        return
    if not isinstance(value, str) or not value:
        raise _invalid(name, value, "a directory path" + (" or None" if optional else ""))


@dataclass(frozen=True)
class CheckpointPolicy:
    """Automatic checkpoints: every `every` epochs into `run_dir`, pruned by keep_*."""

    run_dir: str
    every: int = 1
    keep_last: int | None = None
    keep_best: int | None = None
    monitor: str = "val_loss"
    mode: str = "auto"   # as Keras' ModelCheckpoint: see checkpoints.monitor_mode

    def __post_init__(self) -> None:
        _path("run_dir", self.run_dir)
        _whole("every", self.every, minimum=1)
        _whole("keep_last", self.keep_last, minimum=1, optional=True)
        _whole("keep_best", self.keep_best, minimum=1, optional=True)
        if not isinstance(self.monitor, str) or not self.monitor:
            raise _invalid("monitor", self.monitor, "a metric name such as 'val_loss'")
        if self.mode not in MONITOR_MODES:
            raise _invalid("mode", self.mode, f"one of {MONITOR_MODES}")

    @property
    def prunes(self) -> bool:
        """Whether a later save may delete an earlier checkpoint."""
        return bool(self.keep_last or self.keep_best)


@dataclass(frozen=True)
class BackupPolicy:
    """A BackupAndRestore per fit, so a restarted cell resumes where its fit was.

    `grace`: seconds a worker sent SIGTERM (a preemption) waits for the fit's next
    agreed step boundary, where every worker backs up before the process ends; None
    ends it at once (the resume is then from the last periodic backup)."""

    directory: str
    save_freq: str | int = "epoch"
    grace: float | None = DEFAULT_GRACE

    def __post_init__(self) -> None:
        _path("directory", self.directory)
        if self.save_freq != "epoch":
            _whole("save_freq", self.save_freq, minimum=1)
        if self.grace is not None and (isinstance(self.grace, bool) or not isinstance(
                self.grace, (int, float)) or not 0 < self.grace < math.inf):
            raise _invalid("grace", self.grace, "seconds > 0 or None")


@dataclass(frozen=True)
class TrialMonitor:
    """A sweep's trial: each fit's `monitor` value, averaged over the workers at every
    epoch's end (identical on every worker), is kept for the notebook; a fit stops at the
    end of epoch e (0-based) when that value is worse than `thresholds[e]` (None, or past
    the end: no check). NaN is worse than any threshold. `fallback` is read when the
    logs lack `monitor` (val_loss without validation data: loss)."""

    monitor: str = "val_loss"
    mode: str = "min"
    thresholds: tuple[float | None, ...] = ()
    fallback: str | None = "loss"

    def __post_init__(self) -> None:
        if not isinstance(self.monitor, str) or not self.monitor:
            raise _invalid("monitor", self.monitor, "a metric name such as 'val_loss'")
        if self.mode not in MONITOR_MODES:
            raise _invalid("mode", self.mode, f"one of {MONITOR_MODES}")
        if not isinstance(self.thresholds, tuple) or not all(
                t is None or (isinstance(t, (int, float)) and not isinstance(t, bool))
                for t in self.thresholds):
            raise _invalid("thresholds", self.thresholds, "a tuple of numbers or None")

    def key(self, logged: Collection[str]) -> str | None:
        """The metric read from an epoch's logs: `monitor`, else `fallback`, else None."""
        for name in (self.monitor, self.fallback):
            if name and name in logged:
                return name
        return None

    def stops(self, epoch: int, value: float) -> bool:
        """Whether `value` at `epoch` (0-based) is worse than that epoch's threshold."""
        threshold = self.thresholds[epoch] if epoch < len(self.thresholds) else None
        return threshold is not None and is_worse(value, float(threshold), self.mode)


def is_worse(value: float, than: float, mode: str) -> bool:
    """Strictly worse by `mode` ("min": larger); NaN is worse than anything."""
    if math.isnan(value):
        return True
    return value > than if mode == "min" else value < than


@dataclass(frozen=True)
class CellOptions:
    """What every Keras fit/evaluate in the cell gets, with no change to its code.

    report: send logs to the dashboard; quiet_progress: Keras' own progress bar
    off for calls that did not choose `verbose`; checkpoint / backup: policies
    above (None: off); resume_from: a checkpoint the cell's first fit() starts
    from; tensorboard: a log directory for a TensorBoard callback each fit() gets
    (unless it has one).
    """

    report: bool = False
    quiet_progress: bool = False
    checkpoint: CheckpointPolicy | None = None
    backup: BackupPolicy | None = None
    resume_from: str | None = None
    tensorboard: str | None = None
    trial: TrialMonitor | None = None

    def __post_init__(self) -> None:
        if self.trial is not None and not isinstance(self.trial, TrialMonitor):
            raise _invalid("trial", self.trial, "a TrialMonitor or None")
        for name in ("report", "quiet_progress"):
            if not isinstance(getattr(self, name), bool):
                raise _invalid(name, getattr(self, name), "True or False")
        if self.checkpoint is not None and not isinstance(self.checkpoint, CheckpointPolicy):
            raise _invalid("checkpoint", self.checkpoint, "a CheckpointPolicy or None")
        if self.backup is not None and not isinstance(self.backup, BackupPolicy):
            raise _invalid("backup", self.backup, "a BackupPolicy or None")
        _path("resume_from", self.resume_from, optional=True)
        _path("tensorboard", self.tensorboard, optional=True)


@dataclass(frozen=True)
class StallLimits:
    """A worker stuck in its own code while the others wait for it: after `warning`
    seconds the notebook says which one and where; after `timeout` (if set) the cell
    fails like a timeout. A stuck worker whose heartbeat is silent while its process runs
    (its Python threads cannot run: a call that never gives the GIL back) is taken for hung
    after `hung` seconds when no `timeout` is set, and the workers are restarted: waiting
    on it would never end. None turns any of them off. Watched on the notebook side."""

    warning: float | None = 60.0
    timeout: float | None = None
    hung: float | None = 180.0

    def __post_init__(self) -> None:
        for name in ("warning", "timeout", "hung"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool)
                                      or not isinstance(value, (int, float)) or value <= 0):
                raise _invalid(name, value, "seconds > 0 or None")


@dataclass(frozen=True)
class FitState:
    """The cluster's own instructions about end-of-fit state (not a user option).

    state_dir: where each fit writes what it ended with (None: nothing kept);
    cell_id names those snapshots; replay: when the cell is being replayed, the
    records of its fits (each fit restores its record instead of training).
    """

    state_dir: str | None = None
    cell_id: str = "cell"
    replay: tuple[dict[str, Any], ...] | None = None
