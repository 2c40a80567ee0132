"""The recorded runs for code: `%tfdist runs`, `cluster.runs()`, `tfmw_notebook.list_runs()`.

Read from disk each time (records survive the kernel): see protocol/records.py.
Shown in a notebook as the runs table and figure; the magic adds the interactive
browser (widgets/runs_view.py) with its actions bound to the session.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from typing import Any

from ...protocol import checkpoints, records


class Runs:
    """The runs under `root`: `records()` (dicts), `to_dataframe()`, `delete(name)`.

    Shown as the runs table and figure; with `view` (the magic's) as the interactive
    browser `view(runs)` makes, which also leaves the table and figure as an output."""

    def __init__(self, root: str, found: list[dict[str, Any]],
                 view: Callable[[Runs], Any] | None = None):
        self.root = root
        self._records = found
        self._view = view   # makes the interactive browser (the magic's), else static only

    def records(self) -> list[dict[str, Any]]:
        """Every run's record, oldest first (copies: change them freely)."""
        return copy.deepcopy(self._records)

    def names(self) -> list[str]:
        return [record["name"] for record in self._records]

    def __len__(self) -> int:
        return len(self._records)

    def to_dataframe(self):
        """One row per run: the table's columns and every hyperparameter (needs pandas)."""
        try:
            import pandas
        except ImportError:
            raise ImportError("to_dataframe() needs pandas: pip install pandas "
                              "(records() gives the same data as dicts)") from None
        from ...widgets import run_table

        metrics = run_table.metric_names(self._records)
        rows = [run_table.row(record, metrics) for record in self._records]
        return pandas.DataFrame(rows).set_index("name") if rows else pandas.DataFrame()

    def delete(self, name: str) -> str:
        """Remove run `name`: its record and its checkpoints (nothing else)."""
        path = records.delete_run(self.root, name)
        self._records = [record for record in self._records if record["name"] != name]
        return path

    def __repr__(self) -> str:
        if not self._records:
            return f"no runs under {self.root}"
        return f"{len(self)} runs under {self.root}: {', '.join(self.names())}"

    def _repr_mimebundle_(self, include=None, exclude=None):
        bundle = {"text/plain": repr(self)}
        if not self._records:
            return bundle
        from ...widgets import runs_view

        if self._view is None:      # for code: the table and the figure, no widgets
            return {**bundle, **static_bundle(runs_view.static_html(self._records))}
        view = self._view(self)     # the browser (the view shows its static twin itself)
        return {**(view.widget._repr_mimebundle_() or {}), **bundle}


def static_bundle(html: str) -> dict[str, str]:
    """The static table and figure as an output of their own (HTML, and the PNG alone)."""
    return {"text/html": html, "image/png": _figure_of(html)}


def _figure_of(html: str) -> str:
    """The base64 PNG a static table's figure embeds (also given as the bundle's image)."""
    return html.rsplit("base64,", 1)[1].split('"', 1)[0]


def list_runs(root: str | os.PathLike[str] = checkpoints.DEFAULT_ROOT) -> Runs:
    """The recorded runs under `root` (default ./tfdist_checkpoints), oldest first."""
    if not isinstance(root, (str, os.PathLike)):
        raise ValueError(f"Invalid value for argument `root`. Received: root={root!r}. "
                         "Expected a directory path")
    path = os.path.abspath(os.fspath(root))
    return Runs(path, records.list_records(path))
