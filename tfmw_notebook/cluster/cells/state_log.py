"""What gave the workers their state, in order: the record a restore replays.

Each successful %%tfdist cell, each --push and each --shard since the workers last
started is logged; a cell carries what each of its fit() calls ended with
(History, and where that state can be read: see worker/fits/fit_state.py), merged
over the ranks: the chief's History, every rank's own path. Pure, but for
KeptState, which owns the directory those paths are in.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from ..data.shard_sets import ShardSets


@dataclass(frozen=True)
class FitRecord:
    """One fit() call's end: its History and where each rank's state is kept."""

    history: dict[str, list[float]]
    params: dict[str, Any]
    epoch: list[int]
    source: str | None           # "checkpoint", "snapshot", or None (nothing kept)
    paths: tuple[str | None, ...]  # per rank

    def for_worker(self) -> dict:
        """The form worker/fits/fit_state.replay_fit reads."""
        return {"history": self.history, "params": self.params, "epoch": self.epoch,
                "source": self.source, "paths": list(self.paths)}


@dataclass(frozen=True)
class LoggedStep:
    kind: str                    # "push", "shard" or "cell"
    payload: Any                 # the pushed {name: value}, a ShardSet, or the cell's source
    fits: tuple[FitRecord, ...] = ()

    def without_kept_state(self) -> LoggedStep:
        """The same step with its fits to be trained again when replayed (their kept state
        cannot be read by the workers that replay it, e.g. saved by the other Keras)."""
        fits = tuple(dataclasses.replace(fit, source=None, paths=()) for fit in self.fits)
        return dataclasses.replace(self, fits=fits)


def merge_fit_records(per_rank: list[list[dict]]) -> tuple[FitRecord, ...]:
    """One FitRecord per fit call from every rank's list (the chief's History).

    Ranks ran the same fit calls; a rank with fewer records (it could not write
    one) leaves its path empty, and a replay then reads another rank's.
    """
    if not per_rank:
        return ()
    merged = []
    for index, chief in enumerate(per_rank[0]):
        paths = [records[index].get("path") if index < len(records) else None
                 for records in per_rank]
        source = chief.get("source")
        merged.append(FitRecord(history=dict(chief.get("history") or {}),
                                params=dict(chief.get("params") or {}),
                                epoch=list(chief.get("epoch") or []),
                                source=source if any(paths) else None,
                                paths=tuple(paths)))
    return tuple(merged)


@dataclass
class StateLog:
    steps: list[LoggedStep] = field(default_factory=list)

    def add_push(self, values: dict[str, Any]) -> None:
        self.steps.append(LoggedStep("push", dict(values)))

    def add_shard(self, shard_set: Any) -> None:
        """A shard set the workers took their rows of (cluster/data/shard_sets.py)."""
        self.steps.append(LoggedStep("shard", shard_set))

    def add_cell(self, source: str, fits: tuple[FitRecord, ...] = ()) -> None:
        self.steps.append(LoggedStep("cell", source, tuple(fits)))

    def add(self, step: LoggedStep) -> None:
        self.steps.append(step)

    def clear(self) -> None:
        self.steps.clear()

    def snapshot(self) -> list[LoggedStep]:
        return list(self.steps)

    @property
    def cells(self) -> int:
        return sum(1 for step in self.steps if step.kind == "cell")


class KeptState:
    """The log, plus the directory where workers keep each fit's end state.

    `enabled` is `%tfdist restore on|off`: off, fits keep nothing. The
    directory (under the system's temp dir) is made when first needed and
    removed by `forget`, when no restore can need it any more.
    """

    def __init__(self) -> None:
        self.log = StateLog()
        # The sets of shared rows the workers hold: kept past `forget` (a restart's replay
        # delivers them again), freed when sharded anew or when the cluster stops.
        self.shards = ShardSets()
        self.enabled = True
        self._directory: str | None = None
        self._cells = 0

    def next_cell(self):
        """The FitState for the next cell: where its fits write what they ended with."""
        import tempfile

        from ...protocol.run_options import FitState

        if not self.enabled:
            return FitState()
        if self._directory is None:
            self._directory = tempfile.mkdtemp(prefix="tfmw-state-")
        self._cells += 1
        return FitState(state_dir=self._directory, cell_id=f"cell-{self._cells}")

    def forget(self) -> None:
        import shutil

        self.log.clear()
        if self._directory is not None:
            shutil.rmtree(self._directory, ignore_errors=True)
            self._directory = None


@dataclass
class RestoreReport:
    """What a restore did, for the one line the notebook shows."""

    cells: int = 0
    fits_restored: int = 0
    fits_rerun: int = 0
    seconds: float = 0.0
    failed_cell: int | None = None   # 1-based position among the logged cells
    error: str = ""
    rerun_reason: str = "no saved state"   # why fits_rerun fits trained again

    def line(self) -> str:
        text = (f"restored {self.cells} cell{'s' if self.cells != 1 else ''} in "
                f"{self.seconds:.1f} s ({self.fits_restored} fit"
                f"{'s' if self.fits_restored != 1 else ''} restored from checkpoints")
        if self.fits_rerun:
            text += f", {self.fits_rerun} trained again: {self.rerun_reason}"
        text += ")"
        if self.failed_cell is not None:
            text += (f"; replaying cell {self.failed_cell} failed ({self.error}), so the "
                     "cells after it were not replayed")
        return text
