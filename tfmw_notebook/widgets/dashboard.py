"""Live training dashboard: loss curves, per-worker progress, latest values.

Renders a `MetricsStore`. The curves are drawn with matplotlib's Agg backend into a
PNG shown in an `ipywidgets.Image`, so no ipympl or front-end extension is needed,
and the image is redrawn within a small share of the kernel's time (DRAW_SHARE).
"""

from __future__ import annotations

import html
import io
import math
import time
from typing import Callable, Iterable, Mapping

import ipywidgets as widgets

from ..metrics import VAL_PREFIX, MetricsStore, WorkerProgress

# Drawing takes the kernel's CPU, which the workers need when they fill the machine's
# cores (measured on 2 cores: each ms of drawing during a fit made the fit about a ms
# longer). So live drawings take at most DRAW_SHARE of the time since the dashboard
# appeared: a drawing is due when the time drawn so far plus the next drawing's expected
# cost fits in that share (time not drawn is saved for one drawing at most). A warm fit
# of a second is drawn only when it ends; after a first step that traces for a second
# or more the curves appear with the first point; a long fit is redrawn about once a
# second, and at least every MAX_REDRAW_INTERVAL seconds (the picture must be seen to move).
DRAW_SHARE = 0.02
FIRST_DRAWING_GUESS = 0.025   # seconds; one drawing measured 13-40 ms on 2 cores
MAX_REDRAW_INTERVAL = 2.0
# Beyond this many points per line, drawing slows the kernel and shows nothing new.
_MAX_POINTS_PER_LINE = 2000
# Figures are drawn at SCALE times the pixels of the size they are shown at (CSS px, 80
# per figure inch): sharp on high-DPI screens, and never stretched to the cell's width.
SCALE = 2
SHOWN_DPI = 80


def shown_width(png: bytes) -> int:
    """The width in CSS pixels to show a figure drawn at SCALE (from its PNG header)."""
    return int.from_bytes(png[16:20], "big") // SCALE


def sharp_image() -> widgets.Image:
    """An Image widget that shows a figure at its own size (up to the cell's width)."""
    return widgets.Image(format="png", value=b"",
                         layout=widgets.Layout(max_width="100%", height="auto",
                                               align_self="flex-start"))


def show_figure(image: widgets.Image, png: bytes) -> None:
    image.value = png
    image.layout.width = f"{shown_width(png)}px"


def close_widget_tree(widget: widgets.Widget) -> None:
    """Close a widget, its children and their layouts and styles. ipywidgets keeps
    every open widget (and its comm) until closed; closing only the outer box would
    leave each cell's image and progress rows alive for the kernel's whole life."""
    for child in getattr(widget, "children", ()):
        close_widget_tree(child)
    for part in ("layout", "style"):
        inner = getattr(widget, part, None)
        if isinstance(inner, widgets.Widget):
            inner.close()
    widget.close()


def whole_epoch_ticks(axes) -> None:
    """Epoch axes tick whole epochs only (no 4.25 or 0.5)."""
    from matplotlib.ticker import MaxNLocator

    axes.xaxis.set_major_locator(MaxNLocator(integer=True))


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


def _per_epoch(xs: list[float], ys: list[float]) -> tuple[list[float], list[float]]:
    """A gap (NaN) between epochs: each epoch's running mean is a line of its own, not
    joined to the next one's fresh start (which read as a drop at every epoch)."""
    out_x: list[float] = []
    out_y: list[float] = []
    for x, y in zip(xs, ys):
        if out_x and math.ceil(x) != math.ceil(out_x[-1]):
            out_x.append(math.nan)
            out_y.append(math.nan)
        out_x.append(x)
        out_y.append(y)
    return out_x, out_y


def _thinned(xs: list[float], ys: list[float]) -> tuple[list[float], list[float]]:
    stride = max(1, -(-len(xs) // _MAX_POINTS_PER_LINE))
    if stride == 1:
        return xs, ys
    # Keep the last point: it is the newest value, the one the eye goes to.
    return xs[::stride] + xs[-1:], ys[::stride] + ys[-1:]


def _import_matplotlib() -> None:
    import matplotlib.backends.backend_agg  # noqa: F401
    import matplotlib.figure  # noqa: F401


def render_curves_png(store: MetricsStore, width_per_panel: float = 4.0, height: float = 3.0,
                      dpi: int = SHOWN_DPI * SCALE) -> bytes:
    """One subplot per metric panel (training and val_ together) as PNG bytes.

    Batch values are a thin line at fractional epochs; epoch-end values are marked.
    """
    # The object-oriented API leaves pyplot's global state and backend alone.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    panels = store.metric_names()
    columns = max(1, len(panels))
    figure = Figure(figsize=(width_per_panel * columns, height), dpi=dpi)
    # Fixed margins: an automatic layout pass would double the drawing time.
    figure.subplots_adjust(left=0.1 / columns ** 0.5, right=0.98, bottom=0.16, top=0.9, wspace=0.3)
    FigureCanvasAgg(figure)
    if not panels:
        axes = figure.add_subplot(1, 1, 1)
        axes.text(0.5, 0.5, "waiting for the first batch…", ha="center", va="center",
                  transform=axes.transAxes, color="gray")
        axes.set_axis_off()
    batches, epochs, reports = store.batch_series(), store.epoch_series(), store.report_series()
    epoch_means = store.batch_values_are_epoch_means()
    for index, (panel, names) in enumerate(panels.items()):
        axes = figure.add_subplot(1, len(panels), index + 1)
        for color, name in zip(("C0", "C1", "C2", "C3"), names):
            if name in batches:
                xs, ys = _thinned(*batches[name])
                if epoch_means:
                    xs, ys = _per_epoch(xs, ys)
                axes.plot(xs, ys, color=color, linewidth=1, alpha=0.6)
            if name in epochs:
                axes.plot(*epochs[name], color=color, marker="o", linewidth=1.5, label=name,
                          linestyle="--" if name.startswith(VAL_PREFIX) else "-")
            if name in reports:
                axes.plot(*_thinned(*reports[name]), color=color, linewidth=1.5, label=name)
        axes.set_title(panel)
        by_epoch = batches or epochs or any(
            r["epoch"] is not None for rank in store.ranks for r in store.reports(rank))
        axes.set_xlabel("epoch" if by_epoch else "step")
        if by_epoch:
            whole_epoch_ticks(axes)
        axes.grid(True, alpha=0.3)
        if axes.get_legend_handles_labels()[0]:
            axes.legend(fontsize="small", loc="upper right")   # "best" is slow with many points
    buffer = io.BytesIO()
    # zlib level 1: at the default level 6 compressing took a quarter of the drawing
    # time, for a PNG a fifth smaller.
    figure.savefig(buffer, format="png", pil_kwargs={"compress_level": 1})
    return buffer.getvalue()


class _ProgressRow:
    def __init__(self) -> None:
        self.bar = widgets.FloatProgress(value=0.0, min=0.0, max=1.0,
                                         layout=widgets.Layout(width="30%", min_width="80px"))
        # HTML, not Label: a label is cut off in a narrow window, this wraps.
        self.label = widgets.HTML()
        self.widget = widgets.HBox([self.bar, self.label])
        self.widget.add_class("tfmw-worker-progress")   # CSS classes: for styling and tests

    def show(self, progress: WorkerProgress, behind: bool) -> None:
        fraction = progress.fraction
        if fraction is None and progress.steps and progress.position is not None:
            fraction = progress.step / progress.steps      # length unknown: this epoch only
        self.bar.value = fraction or 0.0
        self.bar.bar_style = "warning" if behind else ("success" if progress.finished else "info")
        self.label.value = html.escape(progress_text(progress, behind))


class Dashboard:
    """The live view of a training run: `widget` to display, `feed(events)` to update."""

    def __init__(self, store: MetricsStore | None = None, min_redraw_interval: float = 0.5,
                 clock: Callable[[], float] = time.monotonic):
        self.store = store if store is not None else MetricsStore()
        self.min_redraw_interval = min_redraw_interval
        self._clock = clock
        self._started = clock()
        self._last_redraw = -float("inf")
        self._drawing_seconds = 0.0      # spent on live drawings so far
        self._expected_cost = FIRST_DRAWING_GUESS
        self._stale = True              # the image does not show everything in the store yet
        self.redraws = 0
        self.image = sharp_image()
        self.progress_box = widgets.VBox()
        self.latest_html = widgets.HTML()
        self.widget = widgets.VBox([self.image, self.progress_box, self.latest_html])
        self.widget.add_class("tfmw-dashboard")
        self.image.add_class("tfmw-curves")
        self._rows: dict[int, _ProgressRow] = {}

    def feed(self, events: Mapping | Iterable[Mapping]) -> None:
        """Add events to the store and update the view (the image only if it is due)."""
        self.store.feed(events)
        self._stale = True
        self.refresh()

    def refresh(self, force: bool = False) -> None:
        """Update progress and latest values; redraw the curves if due (or `force`)."""
        self._show_progress()
        self._show_latest()
        if force or (self._stale and self._drawing_due()):
            self._redraw()

    def _drawing_due(self) -> bool:
        if not self.store.metric_names():
            return False     # no curve yet: the progress rows say "starting"
        now = self._clock()
        since_last = now - max(self._last_redraw, self._started)
        if since_last >= MAX_REDRAW_INTERVAL:
            return True
        within_share = (self._drawing_seconds + self._expected_cost
                        <= DRAW_SHARE * (now - self._started))
        return since_last >= self.min_redraw_interval and within_share

    def final_png(self) -> bytes:
        """The curves as they stand, for the static image left in the cell."""
        return render_curves_png(self.store)

    def close(self) -> None:
        """Close every widget of the view (the static image has replaced it)."""
        close_widget_tree(self.widget)

    def summary_line(self) -> str:
        return summary_text(self.store.summary())

    def _redraw(self) -> None:
        _import_matplotlib()     # the kernel's first drawing imports it: not a drawing's cost
        began = self._clock()
        # Time not drawn is saved for one drawing, not more: after a long wait for the
        # first point the next drawings do not come twice a second.
        self._drawing_seconds = max(self._drawing_seconds,
                                    DRAW_SHARE * (began - self._started) - self._expected_cost)
        show_figure(self.image, render_curves_png(self.store))
        self._last_redraw = self._clock()
        self._expected_cost = self._last_redraw - began
        self._drawing_seconds += self._expected_cost
        self._stale = False
        self.redraws += 1

    def _show_progress(self) -> None:
        behind = set(self.store.lagging_ranks())
        for rank in self.store.ranks:
            if rank not in self._rows:
                self._rows[rank] = _ProgressRow()
                self.progress_box.children = [self._rows[r].widget for r in sorted(self._rows)]
            self._rows[rank].show(self.store.progress(rank), rank in behind)

    def _show_latest(self) -> None:
        latest = self.store.latest()
        self.latest_html.value = " &nbsp;·&nbsp; ".join(
            f"<b>{html.escape(name)}</b> {format_value(value)}" for name, value in latest.items())


class TextReporter:
    """Fallback for a terminal: one line per finished epoch per worker, none per batch."""

    def __init__(self, store: MetricsStore | None = None, write: Callable[[str], object] = print):
        self.store = store if store is not None else MetricsStore()
        self._write = write
        self._epochs_written: dict[int, int] = {}
        self._evaluation_runs_written: dict[int, int] = {}

    def feed(self, events: Mapping | Iterable[Mapping]) -> None:
        self.store.feed(events)
        self.refresh()

    def refresh(self, force: bool = False) -> None:
        for rank in self.store.ranks:
            progress = self.store.progress(rank)
            records = self.store.epoch_logs(rank)
            for record in records[self._epochs_written.get(rank, 0):]:
                total = f"/{progress.epochs}" if progress.epochs else ""
                self._write(f"worker {rank} · epoch {record['epoch'] + 1}{total} · "
                            f"{format_metrics(record['logs'])}")
            self._epochs_written[rank] = len(records)
            evaluated = progress.mode == "evaluate" and progress.finished
            if evaluated and self._evaluation_runs_written.get(rank) != progress.run:
                self._write(f"worker {rank} · evaluate · "
                            f"{format_metrics(self.store.evaluation(rank) or {})}")
                self._evaluation_runs_written[rank] = progress.run

    def summary_line(self) -> str:
        return summary_text(self.store.summary())
