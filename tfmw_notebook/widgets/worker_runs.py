"""What one worker's events say: where it is in its run, and what it logged.

`MetricsStore` (metrics.py) keeps one `WorkerRuns` per rank and asks it to take
each event; this module knows how a batch, an epoch or a report moves a worker's
progress, speed and x axis. Pure Python, fed plain dicts.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..protocol.events import EVALUATE, FIT, metric_values

CUSTOM = "custom"   # a custom loop that only calls tfdist.report
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
    stalled: str | None = None        # set by the notebook's stall watch, cleared by events

    @property
    def fraction(self) -> float | None:
        """Share of the run done, 0..1, or None when the run's length is unknown."""
        if self.finished:
            return 1.0
        if self.position is None or not self.epochs:
            return None
        return min(1.0, max(0.0, self.position / self.epochs))


@dataclass
class WorkerRuns:
    """One worker's records and progress. Each `on_*` returns the values it logged."""

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
    # Batch logs are means since the epoch began (Keras' own train_step): each epoch's
    # batch curve is drawn as a line of its own (dashboard.py).
    running_means: bool = False

    def on_train_begin(self, event: Mapping, time: float) -> dict:
        old = self.progress
        self.progress = WorkerProgress(
            rank=old.rank,
            mode=str(event.get("mode") or FIT),
            run=old.run + 1,
            epochs=_int_or_none(event.get("epochs")),
            steps=_int_or_none(event.get("steps")),
            started_at=time,
            last_event_time=time,
        )
        self.rate_window.clear()
        self.running_means = self.running_means or bool(event.get("running_means"))
        self.steps_before_epoch = self.global_step = 0
        self.run_begin_time = time
        self.run_epoch_times = []
        # A second fit in the same cell continues the x axis after the first one
        # (unless it already counts on from there, as fit(initial_epoch=...) does).
        self.offset_pending = self.progress.mode == FIT and bool(self.epochs)
        return {}

    def on_batch(self, event: Mapping, time: float) -> dict:
        progress = self.progress
        epoch, step = int(event.get("epoch") or 0), int(event["step"])
        self._enter_epoch(epoch)
        progress.step = step + 1
        progress.position = epoch + (progress.step / progress.steps if progress.steps else 0.0)
        progress.finished = False
        self.global_step = self.steps_before_epoch + progress.step
        self.rate_window.append((time, self.global_step))
        self._update_speed()
        logs = metric_values(event.get("logs"))
        if progress.mode != FIT:
            return {}
        self.batches.append((self.epoch_offset + progress.position, logs))
        return logs

    def on_epoch(self, event: Mapping, time: float) -> dict:
        progress = self.progress
        epoch = int(event["epoch"])
        self._enter_epoch(epoch)
        progress.position = float(epoch + 1)
        steps_done = _int_or_none(event.get("steps")) or progress.steps
        if steps_done:
            # The epoch's last batches may not have been sent: count them here.
            progress.step = steps_done
            self.global_step = self.steps_before_epoch + steps_done
        logs = metric_values(event.get("logs"))
        record = {"epoch": epoch, "x": self.epoch_offset + epoch + 1, "time": time, "logs": logs}
        if event.get("samples") is not None:
            record["samples"] = int(event["samples"])
        self.epochs.append(record)
        self.run_epoch_times.append(time)
        self._update_speed()
        return logs

    def on_train_end(self, event: Mapping, time: float) -> dict:
        self.progress.finished = True
        self.progress.eta_seconds = 0.0
        if self.progress.mode == EVALUATE:
            self.evaluation = metric_values(event.get("logs"))
        return {}

    def on_report(self, event: Mapping, time: float) -> dict:
        progress = self.progress
        if progress.run == 0:
            progress.mode = CUSTOM
        step = event.get("step")
        step = len(self.reports) if step is None else int(step)
        epoch = event.get("epoch")
        epoch = None if epoch is None else float(epoch)
        metrics = metric_values(event.get("metrics"))
        self.reports.append({"x": step if epoch is None else epoch, "step": step,
                             "epoch": epoch, "time": time, "metrics": metrics})
        progress.step = step
        if epoch is not None:
            progress.position = epoch
        return metrics

    def _enter_epoch(self, epoch: int) -> None:
        """Place the run on its first event; count the steps of the epoch it left."""
        progress = self.progress
        if progress.run_start is None:
            progress.run_start = float(epoch)
        if self.offset_pending:
            already_drawn = max(record["x"] for record in self.epochs)
            self.epoch_offset = max(0.0, already_drawn - epoch)
            self.offset_pending = False
        if epoch != progress.epoch:
            self.steps_before_epoch = self.global_step
        progress.epoch = epoch

    def _update_speed(self) -> None:
        progress, window = self.progress, self.rate_window
        if len(window) >= 2 and window[-1][0] > window[0][0]:
            (first_time, first_step), (last_time, last_step) = window[0], window[-1]
            progress.steps_per_second = (last_step - first_step) / (last_time - first_time)
        progress.eta_seconds = self._eta()

    def _eta(self) -> float | None:
        progress = self.progress
        if progress.epochs is None or progress.position is None:
            return None
        epochs_left = max(0.0, progress.epochs - progress.position)
        if progress.steps and progress.steps_per_second:
            return epochs_left * progress.steps / progress.steps_per_second
        # Steps per epoch unknown: go by how long the finished epochs took.
        if self.run_epoch_times and self.run_begin_time is not None:
            per_epoch = (self.run_epoch_times[-1] - self.run_begin_time) / len(self.run_epoch_times)
            return epochs_left * per_epoch
        return None


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)
