"""The training curves as one PNG: a panel per metric, batches thin, epochs marked."""

from __future__ import annotations

import io
import math

from .figures import SCALE, SHOWN_DPI, wants_log_scale, whole_epoch_ticks
from .metrics import VAL_PREFIX, MetricsStore

# Beyond this many points per line, drawing slows the kernel and shows nothing new.
_MAX_POINTS_PER_LINE = 2000


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


def _draw_lines(axes, names, series, epoch_means: bool) -> list[float]:
    """The panel's lines: batches thin, epoch ends marked, reports; the values drawn."""
    batches, epochs, reports = series
    drawn: list[float] = []
    for color, name in zip(("C0", "C1", "C2", "C3"), names):
        if name in batches:
            xs, ys = _thinned(*batches[name])
            if epoch_means:
                xs, ys = _per_epoch(xs, ys)
            axes.plot(xs, ys, color=color, linewidth=1, alpha=0.6)
            drawn += ys
        if name in epochs:
            axes.plot(*epochs[name], color=color, marker="o", linewidth=1.5, label=name,
                      linestyle="--" if name.startswith(VAL_PREFIX) else "-")
            drawn += epochs[name][1]
        if name in reports:
            axes.plot(*_thinned(*reports[name]), color=color, linewidth=1.5, label=name)
            drawn += reports[name][1]
    return drawn


def _draw_panel(axes, panel: str, names: list[str], store: MetricsStore, series,
                epoch_means: bool) -> None:
    """One metric panel: its lines (_draw_lines), a log scale where they span decades,
    its title, an x axis in epochs (steps for reports without epochs), a grid and a legend."""
    batches, epochs, _ = series
    drawn = _draw_lines(axes, names, series, epoch_means)
    if wants_log_scale(drawn):
        axes.set_yscale("log")
    axes.set_title(panel)
    by_epoch = batches or epochs or any(
        r["epoch"] is not None for rank in store.ranks for r in store.reports(rank))
    axes.set_xlabel("epoch" if by_epoch else "step")
    if by_epoch:
        whole_epoch_ticks(axes)
    axes.grid(True, alpha=0.3)
    if axes.get_legend_handles_labels()[0]:
        axes.legend(fontsize="small", loc="upper right")   # "best" is slow with many points


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
        _draw_panel(axes, panel, names, store, (batches, epochs, reports), epoch_means)
    buffer = io.BytesIO()
    # zlib level 1: at the default level 6 compressing took a quarter of the drawing
    # time, for a PNG a fifth smaller.
    figure.savefig(buffer, format="png", pil_kwargs={"compress_level": 1})
    return buffer.getvalue()
