"""Notebook views of the pure stores (ipywidgets + matplotlib live here only)."""

from .dashboard import Dashboard, TextReporter, render_curves_png

__all__ = ["Dashboard", "TextReporter", "render_curves_png"]
