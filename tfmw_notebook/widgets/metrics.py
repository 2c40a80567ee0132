"""A pure store of the training events the workers send: curves, progress, summary.

No TensorFlow, ipywidgets or matplotlib here: the dashboard and the text reporter
render this store, and tests drive it with plain dicts. The events are described
in `tfmw_notebook.protocol.events`; kinds and fields this store does not know are ignored
(and counted), so newer workers can talk to an older notebook.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from ..protocol.events import BATCH, DROPPED, EPOCH, REPORT, TRAIN_BEGIN, TRAIN_END, metric_values
from .worker_runs import CUSTOM, WorkerProgress, WorkerRuns

VAL_PREFIX = "val_"

# The old name of the protocol's coercion (`events.metric_values`), kept for existing imports.
plain_floats = metric_values


def panel_name(metric: str) -> str:
    """'val_loss' and 'loss' share the panel 'loss'."""
    return metric[len(VAL_PREFIX):] if metric.startswith(VAL_PREFIX) else metric


class MetricsStore:
    """Collects events from all workers; answers what the dashboard needs to draw."""

    def __init__(self) -> None:
        self._workers: dict[int, WorkerRuns] = {}
        self._names: list[str] = []                            # first-seen order
        self._latest: dict[str, tuple[float, int, float]] = {}  # name -> (time, rank, value)
        self._first_time: float | None = None
        self._last_time: float | None = None
        self.ignored_events = 0     # events this store could not read
        self.lost_events = 0        # events the workers could not send (they say so later)

    # -- input ---------------------------------------------------------------------

    def feed(self, events: Mapping | Iterable[Mapping]) -> None:
        """Take one event or a list of events (per worker in the order sent)."""
        if isinstance(events, Mapping):
            events = [events]
        for event in events:
            self._apply(event)

    def _apply(self, event: Mapping) -> None:
        if not isinstance(event, Mapping):
            self.ignored_events += 1
            return
        self.lost_events += _dropped_count(event)
        handler = _HANDLERS.get(str(event.get("kind")))
        try:
            rank = int(event["rank"])
            time = float(event["time"])
        except (KeyError, TypeError, ValueError):
            handler = None
        if handler is None:
            self.ignored_events += 1
            return
        worker = self._worker(rank)
        try:
            logged = handler(worker, event, time)
        except (KeyError, TypeError, ValueError):   # a malformed event must not stop the view
            self.ignored_events += 1
            return
        self._note_values(logged, time, worker.progress.rank)
        worker.progress.last_event_time = time
        worker.progress.stalled = None
        self._first_time = time if self._first_time is None else min(self._first_time, time)
        self._last_time = time if self._last_time is None else max(self._last_time, time)

    def _worker(self, rank: int) -> WorkerRuns:
        if rank not in self._workers:
            self._workers[rank] = WorkerRuns(WorkerProgress(rank=rank))
        return self._workers[rank]

    def _note_values(self, values: Mapping[str, float], time: float, rank: int) -> None:
        for name, value in values.items():
            if name not in self._names:
                self._names.append(name)
            previous = self._latest.get(name)
            if previous is None or (time, -rank) >= (previous[0], -previous[1]):
                self._latest[name] = (time, rank, value)

    # -- per worker ----------------------------------------------------------------

    @property
    def ranks(self) -> list[int]:
        return sorted(self._workers)

    def progress(self, rank: int) -> WorkerProgress:
        return self._workers[rank].progress

    def epoch_logs(self, rank: int) -> list[dict]:
        """Epoch-end records of one worker: {"epoch", "x", "time", "logs", ["samples"]}."""
        return [dict(record, logs=dict(record["logs"])) for record in self._workers[rank].epochs]

    def batch_logs(self, rank: int) -> list[tuple[float, dict]]:
        """(fractional epoch, logs) for each training batch of one worker."""
        return [(x, dict(logs)) for x, logs in self._workers[rank].batches]

    def reports(self, rank: int) -> list[dict]:
        return [dict(record, metrics=dict(record["metrics"]))
                for record in self._workers[rank].reports]

    def evaluation(self, rank: int) -> dict | None:
        """Final logs of this worker's last evaluate run, if it ran one."""
        result = self._workers[rank].evaluation
        return None if result is None else dict(result)

    def history(self, rank: int | None = None) -> dict[str, list[float]]:
        """Like Keras `History.history` for one worker (default: the lowest rank)."""
        if rank is None:
            if not self._workers:
                return {}
            rank = self.ranks[0]
        history: dict[str, list[float]] = {}
        for record in self._workers[rank].epochs:
            for name, value in record["logs"].items():
                history.setdefault(name, []).append(value)
        return history

    # -- across workers ------------------------------------------------------------

    def merged_history(self) -> dict[str, list[float]]:
        """Per epoch, the mean over the workers that have reached it."""
        return {name: ys for name, (_, ys) in self.epoch_series().items()}

    def epoch_series(self, rank: int | None = None) -> dict[str, tuple[list[float], list[float]]]:
        """name -> (x, y) of epoch-end values; x is the epoch's end (epoch index + 1)."""
        return self._series(rank, lambda w: ((r["x"], r["logs"]) for r in w.epochs))

    def batch_series(self, rank: int | None = None) -> dict[str, tuple[list[float], list[float]]]:
        """name -> (x, y) of per-batch values at fractional epochs."""
        return self._series(rank, lambda w: iter(w.batches))

    def batch_values_are_epoch_means(self) -> bool:
        """Whether batch values are means since their epoch began (Keras' own train_step
        logs them so), which start afresh with each epoch."""
        return any(w.running_means for w in self._workers.values())

    def report_series(self, rank: int | None = None) -> dict[str, tuple[list[float], list[float]]]:
        """name -> (x, y) of reported values; x is the report's epoch if given, else its step."""
        return self._series(rank, lambda w: ((r["x"], r["metrics"]) for r in w.reports))

    def _series(self, rank, points_of) -> dict[str, tuple[list[float], list[float]]]:
        """Values at the same x are averaged over workers (rank=None) or taken from one."""
        workers = self._workers.values() if rank is None else [self._workers[rank]]
        return _mean_at_each_x(points_of(worker) for worker in workers)

    def metric_names(self) -> dict[str, list[str]]:
        """Panel -> metrics drawn in it: {"loss": ["loss", "val_loss"], ...}, first-seen order."""
        panels: dict[str, list[str]] = {}
        for name in self._names:
            panels.setdefault(panel_name(name), []).append(name)
        for names in panels.values():
            names.sort(key=lambda n: n.startswith(VAL_PREFIX))   # training before validation
        return panels

    def latest(self) -> dict[str, float]:
        """The most recent value of each metric, from any worker."""
        return {name: self._latest[name][2] for name in self._names}

    def lagging_ranks(self, threshold: float = 0.1) -> list[int]:
        """Ranks behind the leader by at least `threshold` of an epoch (so also by >= 1 epoch).

        A rank that has not begun the run the leader is in counts as behind once the
        leader is `threshold` into it. Finished ranks are not behind in their own run.
        """
        placed = [(w.progress, w.progress.position) for w in self._workers.values()
                  if w.progress.position is not None and w.progress.mode != CUSTOM]
        if len(placed) < 2:
            return []
        leader, lead = max(placed, key=lambda p: (p[0].run, p[1]))
        leader_into_run = lead - (leader.run_start or 0.0)
        behind = []
        for progress, position in placed:
            if progress.run < leader.run:
                lagging = leader_into_run >= threshold
            else:
                lagging = not progress.finished and lead - position >= threshold
            if lagging:
                behind.append(progress.rank)
        return sorted(behind)

    def summary(self) -> dict[str, Any]:
        """epochs, wall_time (s), final metrics, workers; samples and samples_per_second
        when workers sent samples; lost_events and ignored_events when not zero."""
        epochs = _epochs_done(self._workers.values())
        first, last = self._first_time, self._last_time
        wall_time = None if first is None or last is None else last - first
        merged = self.epoch_series()
        final = {name: ys[-1] for name, (_, ys) in merged.items()} if merged else self.latest()
        summary: dict[str, Any] = {"epochs": epochs, "wall_time": wall_time, "final": final,
                                   "workers": len(self._workers)}
        samples = [r["samples"] for w in self._workers.values() for r in w.epochs if "samples" in r]
        if samples and wall_time:
            summary["samples"] = sum(samples)
            summary["samples_per_second"] = sum(samples) / wall_time
        evaluations = {rank: w.evaluation for rank, w in self._workers.items()
                       if w.evaluation is not None}
        if evaluations:
            summary["evaluation"] = evaluations[min(evaluations)]
        if self.lost_events:
            summary["lost_events"] = self.lost_events
        if self.ignored_events:
            summary["ignored_events"] = self.ignored_events
        return summary

    def __repr__(self) -> str:
        summary = self.summary()
        return (f"<MetricsStore: {summary['workers']} workers, {summary['epochs']} epochs; "
                "history(rank), merged_history(), summary()>")


# What each kind of event does to the worker that sent it (see worker_runs.py).
_HANDLERS = {
    TRAIN_BEGIN: WorkerRuns.on_train_begin,
    BATCH: WorkerRuns.on_batch,
    EPOCH: WorkerRuns.on_epoch,
    TRAIN_END: WorkerRuns.on_train_end,
    REPORT: WorkerRuns.on_report,
}


def _mean_at_each_x(points: Iterable[Iterable[tuple[float, Mapping[str, float]]]]
                    ) -> dict[str, tuple[list[float], list[float]]]:
    """name -> (x, y): for each worker's (x, values) points, the mean of each metric's
    values at each x, in order of x."""
    sums: dict[str, dict[float, list[float]]] = {}
    for worker_points in points:
        for x, values in worker_points:
            for name, value in values.items():
                sums.setdefault(name, {}).setdefault(x, []).append(value)
    series = {}
    for name, by_x in sums.items():
        xs = sorted(by_x)
        series[name] = (xs, [math.fsum(by_x[x]) / len(by_x[x]) for x in xs])
    return series


def _epochs_done(workers: Iterable[WorkerRuns]) -> int:
    """The most epochs a worker ended; in a custom loop (no epoch ended), the epochs its
    reports reached, rounded up."""
    workers = list(workers)
    epochs = max((len(w.epochs) for w in workers), default=0)
    if not epochs:
        reached = [r["epoch"] for w in workers for r in w.reports if r["epoch"] is not None]
        epochs = math.ceil(max(reached)) if reached else 0
    return epochs


def _dropped_count(event: Mapping) -> int:
    """The worker's count of events it lost before this one (0 if it lost none)."""
    try:
        return max(0, int(event.get(DROPPED) or 0))
    except (TypeError, ValueError, OverflowError):
        return 0    # a garbled count must not cost the event it came with
