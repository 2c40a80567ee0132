"""Notebook views of the pure stores (ipywidgets + matplotlib live here only).

Importing the package imports no view: the Python API (`import tfmw_notebook`) reaches the
pure stores kept here (`metrics`, `worker_runs`) without ipywidgets or matplotlib, and a
view's libraries load when the view is first asked for.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Dashboard", "TextReporter", "render_curves_png"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import dashboard

        return getattr(dashboard, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
