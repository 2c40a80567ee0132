"""The dashboard's words: per-worker progress lines and the one-line summary. Pure."""

from __future__ import annotations

from collections.abc import Mapping

from .metrics import WorkerProgress


def format_value(value: float) -> str:
    return f"{value:.4g}"


def format_duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes, seconds = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {seconds} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


def format_metrics(values: Mapping[str, float]) -> str:
    return " · ".join(f"{name} {format_value(value)}" for name, value in values.items())


def progress_text(progress: WorkerProgress, behind: bool = False) -> str:
    """'worker 1: epoch 2/4 step 35/70 · 12.3 steps/s · ETA 6 s'"""
    steps = f"step {progress.step}/{progress.steps or '?'}"
    if progress.mode == "custom":
        where = f"step {progress.step}"
    elif progress.position is None:
        where = "starting"
    elif progress.mode == "evaluate":
        where = f"evaluate {steps}"
    else:
        where = f"epoch {progress.epoch + 1}/{progress.epochs or '?'} {steps}"
    text = f"worker {progress.rank}: {where}"
    if progress.finished:
        return text + " · done"
    if progress.stalled:
        return text + f" · {progress.stalled}"
    if progress.steps_per_second:
        text += f" · {progress.steps_per_second:.1f} steps/s"
    if progress.eta_seconds is not None:
        text += f" · ETA {format_duration(progress.eta_seconds)}"
    if behind:
        text += " (behind)"
    return text


def summary_text(summary: Mapping) -> str:
    """'3 epochs · 6.4 s · loss 0.1 · val_loss 0.2 · 1.2e+03 samples/s'

    Ends with '· 3 events lost' / '· 1 event ignored' when the curves miss something.
    Empty when there is nothing to sum up (a cell that failed before an epoch ended).
    """
    if not (summary["epochs"] or summary.get("evaluation") or summary.get("final")
            or _missing_events(summary)):
        return ""
    if not summary["epochs"] and summary.get("evaluation"):
        parts = ["evaluate"]
        if summary.get("wall_time") is not None:
            parts.append(format_duration(summary["wall_time"]))
        parts.append(format_metrics(summary["evaluation"]))
        return " · ".join(parts + _missing_events(summary))
    parts = [_count(summary["epochs"], "epoch")]
    if summary.get("wall_time") is not None:
        parts.append(format_duration(summary["wall_time"]))
    if summary.get("final"):
        parts.append(format_metrics(summary["final"]))
    if "samples_per_second" in summary:
        parts.append(f"{summary['samples_per_second']:.0f} samples/s")
    return " · ".join(parts + _missing_events(summary))


def _missing_events(summary: Mapping) -> list[str]:
    """Events a worker failed to send, and events the store could not read."""
    parts = []
    if summary.get("lost_events"):
        parts.append(f"{_count(summary['lost_events'], 'event')} lost")
    if summary.get("ignored_events"):
        parts.append(f"{_count(summary['ignored_events'], 'event')} ignored")
    return parts


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"
