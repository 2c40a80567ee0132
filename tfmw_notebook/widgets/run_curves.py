"""One figure with several runs' curves of one metric overlaid (PNG bytes, Agg)."""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

from .figures import SCALE, SHOWN_DPI, whole_epoch_ticks


def render_runs_png(records: Sequence[Mapping[str, Any]], metric: str | None,
                    width: float = 6.0, height: float = 3.2,
                    dpi: int = SHOWN_DPI * SCALE) -> bytes:
    """`metric` by epoch for each run in `records`, one line each, labelled by name."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=dpi)
    figure.subplots_adjust(left=0.12, right=0.72, bottom=0.16, top=0.9)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot(1, 1, 1)
    drawn = 0
    for index, record in enumerate(records):
        values = list((record.get("history") or {}).get(metric) or []) if metric else []
        epochs = list(record.get("epochs") or range(len(values)))[-len(values):]
        if values:
            axes.plot([e + 1 for e in epochs], values, marker="o", markersize=3,
                      linewidth=1.5, color=f"C{index % 10}", label=str(record.get("name")))
            drawn += 1
    if drawn:
        axes.set_title(str(metric), fontsize="medium")
        axes.set_xlabel("epoch")
        whole_epoch_ticks(axes)
        axes.grid(True, alpha=0.3)
        axes.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.02, 1.0))
    else:
        text = "select runs to compare" if not records else f"no {metric} in these runs"
        axes.text(0.5, 0.5, text, ha="center", va="center", transform=axes.transAxes,
                  color="gray")
        axes.set_axis_off()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()
