"""A pure store of the training events the workers send: curves, progress, summary.

No TensorFlow, ipywidgets or matplotlib here: the dashboard and the text reporter
render this store, and tests drive it with plain dicts. The events are described
in `tfmw_notebook.events`; kinds and fields this store does not know are ignored
(and counted), so newer workers can talk to an older notebook.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from .events import (
    BATCH,
    DROPPED,
    EPOCH,
    EVALUATE,
    FIT,
    REPORT,
    TRAIN_BEGIN,
    TRAIN_END,
    metric_values,
)

VAL_PREFIX = "val_"
# Steps/s comes from the last few batch events, so it follows speed changes.
_RATE_WINDOW = 20


@dataclass
class WorkerProgress:
    """Where one worker is in its current run (a fit, an evaluate or a custom loop)."""

    rank: int
    mode: str = FIT
    run: int = 0                      # how many runs this worker has begun
    epoch: int = 0                    # 0-based epoch in progress (or last finished)
    epochs: int | None = None
    step: int = 0                     # steps done in `epoch`
    steps: int | None = None
    position: float | None = None     # epochs done, fractional (e.g. 1.5)
    run_start: float | None = None    # position where this run began (initial_epoch)
    steps_per_second: float | None = None
    eta_seconds: float | None = None
    started_at: float | None = None
    last_event_time: float | None = None
    finished: bool = False

    @property
    def fraction(self) -> float | None:
        """Share of the run done, 0..1, or None when the run's length is unknown."""
        if self.finished:
            return 1.0
        if self.position is None or not self.epochs:
            return None
        return min(1.0, max(0.0, self.position / self.epochs))


@dataclass
class _Worker:
    progress: WorkerProgress
    epochs: list[dict] = field(default_factory=list)   # {"epoch", "x", "time", "logs", "samples"?}
    batches: list[tuple[float, dict]] = field(default_factory=list)
    reports: list[dict] = field(default_factory=list)  # {"x", "step", "epoch", "time", "metrics"}
    evaluation: dict | None = None
    # Bookkeeping for steps/s, ETA and placing a second fit after the first.
    rate_window: deque = field(default_factory=lambda: deque(maxlen=_RATE_WINDOW))
    steps_before_epoch: int = 0
    global_step: int = 0
    epoch_offset: float = 0.0
    offset_pending: bool = False
    run_begin_time: float | None = None
    run_epoch_times: list[float] = field(default_factory=list)


# The old name of the protocol's coercion (`events.metric_values`), kept for existing imports.
plain_floats = metric_values


def panel_name(metric: str) -> str:
    """'val_loss' and 'loss' share the panel 'loss'."""
    return metric[len(VAL_PREFIX):] if metric.startswith(VAL_PREFIX) else metric


class MetricsStore:
    """Collects events from all workers; answers what the dashboard needs to draw."""

    def __init__(self) -> None:
        self._workers: dict[int, _Worker] = {}
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
        handler = {
            TRAIN_BEGIN: self._on_train_begin,
            BATCH: self._on_batch,
            EPOCH: self._on_epoch,
            TRAIN_END: self._on_train_end,
            REPORT: self._on_report,
        }.get(event.get("kind"))
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
            handler(worker, event, time)
        except (KeyError, TypeError, ValueError):   # a malformed event must not stop the view
            self.ignored_events += 1
            return
        worker.progress.last_event_time = time
        self._first_time = time if self._first_time is None else min(self._first_time, time)
        self._last_time = time if self._last_time is None else max(self._last_time, time)

    def _worker(self, rank: int) -> _Worker:
        if rank not in self._workers:
            self._workers[rank] = _Worker(WorkerProgress(rank=rank))
        return self._workers[rank]

    def _on_train_begin(self, worker: _Worker, event: Mapping, time: float) -> None:
        old = worker.progress
        worker.progress = WorkerProgress(
            rank=old.rank,
            mode=str(event.get("mode") or FIT),
            run=old.run + 1,
            epochs=_int_or_none(event.get("epochs")),
            steps=_int_or_none(event.get("steps")),
            started_at=time,
            last_event_time=time,
        )
        worker.rate_window.clear()
        worker.steps_before_epoch = worker.global_step = 0
        worker.run_begin_time = time
        worker.run_epoch_times = []
        # A second fit in the same cell continues the x axis after the first one
        # (unless it already counts on from there, as fit(initial_epoch=...) does).
        worker.offset_pending = worker.progress.mode == FIT and bool(worker.epochs)

    def _place_run(self, worker: _Worker, epoch: int) -> None:
        """On a run's first batch or epoch: where it starts, on its own and on the x axis."""
        progress = worker.progress
        if progress.run_start is None:
            progress.run_start = float(epoch)
        if worker.offset_pending:
            already_drawn = max(record["x"] for record in worker.epochs)
            worker.epoch_offset = max(0.0, already_drawn - epoch)
            worker.offset_pending = False

    def _on_batch(self, worker: _Worker, event: Mapping, time: float) -> None:
        progress = worker.progress
        epoch, step = int(event.get("epoch") or 0), int(event["step"])
        self._place_run(worker, epoch)
        if epoch != progress.epoch:
            worker.steps_before_epoch = worker.global_step
        progress.epoch, progress.step = epoch, step + 1
        progress.position = epoch + (progress.step / progress.steps if progress.steps else 0.0)
        progress.finished = False
        worker.global_step = worker.steps_before_epoch + progress.step
        worker.rate_window.append((time, worker.global_step))
        self._update_speed(worker)
        logs = metric_values(event.get("logs"))
        if progress.mode == FIT:
            worker.batches.append((worker.epoch_offset + progress.position, logs))
            self._note_values(logs, time, progress.rank)

    def _on_epoch(self, worker: _Worker, event: Mapping, time: float) -> None:
        progress = worker.progress
        epoch = int(event["epoch"])
        self._place_run(worker, epoch)
        if epoch != progress.epoch:
            worker.steps_before_epoch = worker.global_step
        progress.epoch, progress.position = epoch, float(epoch + 1)
        if progress.steps:
            progress.step = progress.steps
        logs = metric_values(event.get("logs"))
        record = {"epoch": epoch, "x": worker.epoch_offset + epoch + 1, "time": time, "logs": logs}
        if event.get("samples") is not None:
            record["samples"] = int(event["samples"])
        worker.epochs.append(record)
        worker.run_epoch_times.append(time)
        self._update_speed(worker)
        self._note_values(logs, time, progress.rank)

    def _on_train_end(self, worker: _Worker, event: Mapping, time: float) -> None:
        progress = worker.progress
        progress.finished = True
        progress.eta_seconds = 0.0
        if progress.mode == EVALUATE:
            worker.evaluation = metric_values(event.get("logs"))

    def _on_report(self, worker: _Worker, event: Mapping, time: float) -> None:
        progress = worker.progress
        if progress.run == 0:
            progress.mode = "custom"
        step = event.get("step")
        step = len(worker.reports) if step is None else int(step)
        epoch = event.get("epoch")
        epoch = None if epoch is None else float(epoch)
        metrics = metric_values(event.get("metrics"))
        worker.reports.append({"x": step if epoch is None else epoch, "step": step,
                               "epoch": epoch, "time": time, "metrics": metrics})
        progress.step = step
        if epoch is not None:
            progress.position = epoch
        self._note_values(metrics, time, progress.rank)

    def _update_speed(self, worker: _Worker) -> None:
        progress, window = worker.progress, worker.rate_window
        if len(window) >= 2 and window[-1][0] > window[0][0]:
            (first_time, first_step), (last_time, last_step) = window[0], window[-1]
            progress.steps_per_second = (last_step - first_step) / (last_time - first_time)
        progress.eta_seconds = self._eta(worker)

    @staticmethod
    def _eta(worker: _Worker) -> float | None:
        progress = worker.progress
        if progress.epochs is None or progress.position is None:
            return None
        epochs_left = max(0.0, progress.epochs - progress.position)
        if progress.steps and progress.steps_per_second:
            return epochs_left * progress.steps / progress.steps_per_second
        # Steps per epoch unknown: go by how long the finished epochs took.
        if worker.run_epoch_times and worker.run_begin_time is not None:
            times = worker.run_epoch_times
            per_epoch = (times[-1] - worker.run_begin_time) / len(times)
            return epochs_left * per_epoch
        return None

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

    def report_series(self, rank: int | None = None) -> dict[str, tuple[list[float], list[float]]]:
        """name -> (x, y) of reported values; x is the report's epoch if given, else its step."""
        return self._series(rank, lambda w: ((r["x"], r["metrics"]) for r in w.reports))

    def _series(self, rank, points_of) -> dict[str, tuple[list[float], list[float]]]:
        """Values at the same x are averaged over workers (rank=None) or taken from one."""
        workers = self._workers.values() if rank is None else [self._workers[rank]]
        sums: dict[str, dict[float, list[float]]] = {}
        for worker in workers:
            for x, values in points_of(worker):
                for name, value in values.items():
                    sums.setdefault(name, {}).setdefault(x, []).append(value)
        series = {}
        for name, by_x in sums.items():
            xs = sorted(by_x)
            series[name] = (xs, [math.fsum(by_x[x]) / len(by_x[x]) for x in xs])
        return series

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
        placed = [w.progress for w in self._workers.values()
                  if w.progress.position is not None and w.progress.mode != "custom"]
        if len(placed) < 2:
            return []
        leader = max(placed, key=lambda p: (p.run, p.position))
        leader_into_run = leader.position - (leader.run_start or 0.0)
        behind = []
        for progress in placed:
            if progress.run < leader.run:
                lagging = leader_into_run >= threshold
            else:
                lagging = not progress.finished and leader.position - progress.position >= threshold
            if lagging:
                behind.append(progress.rank)
        return sorted(behind)

    def summary(self) -> dict[str, Any]:
        """epochs, wall_time (s), final metrics, workers; samples and samples_per_second
        when workers sent samples; lost_events and ignored_events when not zero."""
        epochs = max((len(w.epochs) for w in self._workers.values()), default=0)
        if not epochs:  # a custom loop: the epochs its reports reached
            reached = [r["epoch"] for w in self._workers.values() for r in w.reports
                       if r["epoch"] is not None]
            epochs = math.ceil(max(reached)) if reached else 0
        wall_time = None if self._first_time is None else self._last_time - self._first_time
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


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


def _dropped_count(event: Mapping) -> int:
    """The worker's count of events it lost before this one (0 if it lost none)."""
    try:
        return max(0, int(event.get(DROPPED) or 0))
    except (TypeError, ValueError, OverflowError):
        return 0    # a garbled count must not cost the event it came with
