"""Figure helpers every view shares: sharp PNGs shown at their own size, tidy axes.

Figures are drawn with matplotlib's Agg backend (the object-oriented API, which leaves
pyplot's global state and backend alone) into PNGs shown in an `ipywidgets.Image`.
"""

from __future__ import annotations

import ipywidgets as widgets

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


def import_matplotlib() -> None:
    import matplotlib.backends.backend_agg  # noqa: F401
    import matplotlib.figure  # noqa: F401
