"""A cell's run records on the notebook side: the chief's part as it is published, and
the records written when the cell ends (protocol/records.py says what a record holds)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...errors import WorkerFailed
from ...protocol import checkpoints, records
from ...protocol.devices import devices_line


class FitCapture:
    """Takes the chief's fit records and every rank's "my fit raised" out of the published
    data; `forward(rank, data)` (the dashboard's) gets every call too."""

    def __init__(self, forward: Callable[[int, dict], None] | None = None):
        self.published: dict[int, dict[str, Any]] = {}
        self.earlier: dict[int, dict[str, Any]] = {}   # the attempts before a restart
        self.raised: set[int] = set()
        self._forward = forward
        self._sources: dict[int, dict] = {}

    def on_data(self, rank: int, data: dict) -> None:
        if self._sources.get(rank) is not data:   # a new attempt after a restart
            self._sources[rank] = data
            if rank == 0 and self.published:
                self.earlier = {index: _went_on(self.earlier.get(index), fit)
                                for index, fit in self.published.items()}
                self.published = {}
        for key in list(data or {}):
            if not isinstance(key, str) or not key.startswith(records.RUN_KEY):
                continue
            index = key.rsplit("-", 1)[-1]
            if key.startswith(records.RAISED_KEY) and index.isdigit():
                self.raised.add(int(index))
            elif rank == 0 and index.isdigit() and isinstance(data[key], dict):
                self.published[int(index)] = data[key]
        if self._forward is not None:
            self._forward(rank, data)

    def fits(self, returned: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
        """Each fit's chief record, by fit number; those the cell returned win."""
        found = dict(self.published)
        found.update({int(fit.get("fit", i + 1)): fit for i, fit in enumerate(returned or [])})
        if not found:
            found = dict(self.earlier)   # the last attempt failed before its first fit
        return [_went_on(self.earlier.get(index), found[index]) for index in sorted(found)]


def _went_on(before: dict[str, Any] | None, fit: dict[str, Any]) -> dict[str, Any]:
    """A fit run again after a restart: its epochs before the one it resumed at (from its
    backup) come from the attempt before; its training time adds up."""
    if before is None:
        return fit
    history, epochs = records.continued(before, fit)
    times = [t for t in (before.get("wall_time"), fit.get("wall_time")) if t is not None]
    return {**fit, "history": history, "epochs": epochs,
            "wall_time": sum(times) if times else None}


@dataclass
class CellRuns:
    """The runs of one cell: where their records go, and writing them when it ends.

    `run_dir`: the cell's checkpoint run directory (None: checkpointing off, a
    directory `<root>/<name>` then holds only the record); `name`: the name asked for
    (--name or a sweep's), else the next run-N."""

    root: str
    run_dir: str | None
    name: str | None
    source: str
    sweep: dict[str, Any] = field(default_factory=dict)
    resumed: bool = False
    capture: FitCapture = field(default_factory=FitCapture)
    cluster: dict[str, Any] = field(default_factory=dict)   # cluster_facts() at the start
    restarts_before: int = 0

    def base_dir(self) -> str:
        if self.run_dir:
            return self.run_dir
        return os.path.join(self.root, self.name or records.next_run_name(self.root))

    def write(self, restarts: int, returned: list[dict] | None, error: BaseException | None
              ) -> list[str]:
        """Write a record per fit the chief reported; returns their directories.

        `restarts`: the cluster's restart count now; `returned`: the cell's
        result.runs (None when it failed); `error`: why it failed."""
        fits = self.capture.fits(returned)
        if not fits:
            return []     # a cell with no fit makes no run
        outcome, why = self._cell_outcome(restarts, error)
        base, written = self.base_dir(), []
        for fit in fits:
            index = int(fit.get("fit", 1))
            run_dir = records.fit_run_dir(base, index)
            has_checkpoints = bool(self.run_dir) and bool(checkpoints.list_checkpoints(run_dir))
            record = records.make_record(
                fit, name=os.path.basename(run_dir), source=self.source, sweep=self.sweep,
                cluster=self.cluster, outcome=records.fit_outcome(
                    fit, outcome, index in self.capture.raised), error=why,
                checkpoint_dir=run_dir if has_checkpoints else None)
            records.write_record(run_dir, record)
            written.append(run_dir)
        return written

    def _cell_outcome(self, restarts: int, error: BaseException | None) -> tuple[str, str]:
        if error is None:
            again = restarts > self.restarts_before or self.resumed
            return (records.RESTORED if again else records.COMPLETED), ""
        if isinstance(error, KeyboardInterrupt) or (
                isinstance(error, WorkerFailed) and error.failure.kind == "interrupt"):
            return records.INTERRUPTED, str(error) or "interrupted"
        return records.FAILED, str(error).strip().splitlines()[0] if str(error).strip() else (
            type(error).__name__)


def cluster_facts(cluster) -> dict[str, Any]:
    """The cluster a run trained on, as a record keeps it."""
    workers = list(getattr(cluster, "workers", []) or [])
    resized = getattr(cluster, "resized", None)
    return {"workers": len(workers), **({"resized_from": resized[0]} if resized else {}),
            "hosts": sorted({w.host for w in workers}),
            "devices": devices_line([w.devices for w in workers], getattr(
                cluster, "communication", "auto")).removeprefix("devices: "),
            "keras": getattr(cluster, "keras_version", ""),
            "tf_version": getattr(cluster, "tf_version", "")}
