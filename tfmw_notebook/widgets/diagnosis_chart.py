"""The step-time breakdown of `%tfdist diagnose` as a stacked bar per worker."""

from __future__ import annotations

import io

from .figures import SCALE, SHOWN_DPI, shown_width

__all__ = ["render_diagnosis_png", "shown_width"]

_COLORS = {"input": "C2", "compute": "C0", "communication": "C3", "framework": "C7"}
_LABELS = {"input": "input", "compute": "compute", "communication": "all-reduce",
           "framework": "framework"}


def render_diagnosis_png(diagnosis, dpi: int = SHOWN_DPI * SCALE) -> bytes:
    """Bars of input, compute, all-reduce and (Keras 3) framework (ms per step) for each
    worker, with the measured step time marked; the verdict's first words as the title."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    workers = diagnosis.workers
    figure = Figure(figsize=(6.0, 1.6 + 0.45 * len(workers)), dpi=dpi)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot(1, 1, 1)
    ranks = [f"worker {w.rank}" for w in workers]
    left = [0.0] * len(workers)
    for part in ("input", "compute", "communication", "framework"):
        if part == "framework" and not any(w.framework for w in workers):
            continue
        widths = [getattr(w, part) * 1e3 for w in workers]
        axes.barh(ranks, widths, left=left, color=_COLORS[part], label=_LABELS[part])
        left = [a + b for a, b in zip(left, widths)]
    axes.scatter([w.step * 1e3 for w in workers], ranks, marker="|", s=400, color="black",
                 zorder=3, label="measured step")
    axes.invert_yaxis()
    axes.set_xlabel("ms per step")
    axes.set_title(diagnosis.verdict().split(":", 1)[0], fontsize=10, loc="left")
    axes.legend(loc="upper center", fontsize=8, ncol=4, bbox_to_anchor=(0.5, -0.3),
                frameon=False)
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()
