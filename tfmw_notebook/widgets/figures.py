"""Figure helpers every view shares: sharp PNGs shown at their own size, tidy axes.

Figures are drawn with matplotlib's Agg backend (the object-oriented API, which leaves
pyplot's global state and backend alone) into PNGs shown in an `ipywidgets.Image`.
"""

from __future__ import annotations

import html
import math
import sys
import threading

import ipywidgets as widgets

# Figures are drawn at SCALE times the pixels of the size they are shown at (CSS px, 80
# per figure inch): sharp on high-DPI screens, and never stretched to the cell's width.
SCALE = 2
SHOWN_DPI = 80


def shown_width(png: bytes) -> int:
    """The width in CSS pixels to show a figure drawn at SCALE (from its PNG header)."""
    return int.from_bytes(png[16:20], "big") // SCALE


WAITING_TEXT = "waiting for the first batch…"


def sharp_image() -> widgets.Image:
    """An Image widget that shows a figure at its own size (up to the cell's width).

    Hidden until its first figure: an Image with no data is a broken-image icon.
    """
    return widgets.Image(format="png", value=b"",
                         layout=widgets.Layout(max_width="100%", height="auto",
                                               align_self="flex-start", display="none"))


def placeholder(text: str = WAITING_TEXT) -> widgets.HTML:
    """What stands where a figure will be, until show_figure draws it."""
    return widgets.HTML(f"<i style='color: gray'>{html.escape(text)}</i>")


def show_figure(image: widgets.Image, png: bytes,
                waiting: widgets.Widget | None = None) -> None:
    """Show `png` in `image` (and hide the `waiting` placeholder)."""
    image.value = png
    image.layout.width = f"{shown_width(png)}px"
    image.layout.display = None
    if waiting is not None:
        waiting.layout.display = "none"


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
    """Epoch axes tick whole epochs only (no 4.25 or 0.5). Within an epoch's first steps
    the axis spans that whole epoch: with less than one whole number in view matplotlib
    falls back to fractional ticks (0.0380, 0.0385, ... written over each other)."""
    from matplotlib.ticker import MaxNLocator

    low, high = axes.get_xlim()
    if math.floor(high) - math.ceil(low) + 1 < 2:   # fewer whole numbers than ticks needed
        first, last = axes.dataLim.intervalx
        start = math.floor(first) if math.isfinite(first) else math.floor(low)
        end = math.ceil(last) if math.isfinite(last) else start + 1
        axes.set_xlim(start, max(end, start + 1))
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))


# A curve spanning more than this many orders of magnitude is drawn on a log axis: on a
# linear one, a loss falling from 2 to 1e-12 is flat zero after its first epochs.
LOG_SCALE_DECADES = 3


def wants_log_scale(values) -> bool:
    """Whether positive `values` span more than LOG_SCALE_DECADES orders of magnitude
    (NaN ignored; any value <= 0 rules a log axis out)."""
    finite = [value for value in values if value == value and abs(value) != float("inf")]
    if not finite or min(finite) <= 0:
        return False
    return max(finite) / min(finite) > 10 ** LOG_SCALE_DECADES


def import_matplotlib() -> None:
    import matplotlib.backends.backend_agg  # noqa: F401
    import matplotlib.figure  # noqa: F401


def import_matplotlib_in_background() -> threading.Thread | None:
    """Import matplotlib on a thread of its own while the workers are idle: the first
    drawing of a cell's dashboard would otherwise import it inside the loop that watches
    the workers (7.9 s on a loaded machine, measured), holding up their output and the
    notice of a failure. A drawing that comes first waits on Python's import lock."""
    if "matplotlib.figure" in sys.modules and "matplotlib.backends.backend_agg" in sys.modules:
        return None
    thread = threading.Thread(target=import_matplotlib, name="tfdist-matplotlib-import",
                              daemon=True)
    thread.start()
    return thread
