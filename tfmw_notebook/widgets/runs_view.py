"""The runs browser: a sortable table of runs, their curves overlaid, and their checkpoints.

Pure data in (records, protocol/records.py) and `actions` for what touches anything
else, like the checkpoint picker:

    actions["checkpoints"](record) -> a widget    the picker of that run's checkpoints
    actions["delete"](record) -> str              remove the run (record and checkpoints),
                                                  on a second press of its button

`static_html()` is what stays in a saved notebook: the table and the figure, shown as an
output of its own beside the browser (hidden while the browser is live).
"""

from __future__ import annotations

import base64
import html
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import ipywidgets as widgets

from . import run_table
from .figures import sharp_image, show_figure, shown_width
from .picker import monitor_metric
from .run_curves import render_runs_png
from .second_press import SecondPress

_SHOWN_AT_FIRST = 8   # runs selected when the view opens (the newest)


class RunsView:
    """`widget` to display; `select`, `sort` and `press` do what the controls do."""

    def __init__(self, records: Sequence[Mapping[str, Any]],
                 actions: Mapping[str, Callable] | None = None):
        self.actions = dict(actions or {})
        self._records = [dict(record) for record in records]
        columns, _ = run_table.table(self._records)
        metrics = run_table.metric_names(self._records)
        self.sort_by = widgets.Dropdown(options=columns, value="name", description="sort by")
        self.descending = widgets.Checkbox(value=False, description="descending", indent=False)
        self.table = widgets.HTML()
        names = [str(record["name"]) for record in self._records]
        self.runs = widgets.SelectMultiple(options=names, value=default_selection(self._records),
                                           rows=min(8, max(2, len(names))), description="runs")
        self.metric = widgets.Dropdown(options=metrics, value=monitor_metric(metrics),
                                       description="metric")
        self.image = sharp_image()
        self.buttons = {name: widgets.Button(description=label, layout=widgets.Layout(
                            width="auto"), button_style="danger" if name == "delete" else "")
                        for name, label in (("checkpoints", "Checkpoints of the run"),
                                            ("delete", "Delete the run"))}
        for name, button in self.buttons.items():
            button.on_click(lambda _button, name=name: self.press(name))
        self._delete = SecondPress(self.buttons["delete"], "Confirm: delete the run")
        self.status, self.detail = widgets.HTML(), widgets.VBox()
        self.widget = widgets.VBox([
            widgets.HBox([self.sort_by, self.descending]), self.table,
            widgets.HBox([self.runs, self.metric]), self.image,
            widgets.HBox(list(self.buttons.values())), self.status, self.detail])
        self.widget.add_class("tfmw-runs")     # CSS classes: for styling and tests
        self.image.add_class("tfmw-runs-curves")
        self.runs.add_class("tfmw-runs-select")
        for control in (self.sort_by, self.descending):
            control.observe(lambda _change: self._show_table(), names="value")
        for control in (self.runs, self.metric):
            control.observe(lambda _change: self._redraw(), names="value")
        self.runs.observe(lambda _change: self._delete.disarm(), names="value")
        self.redraws = 0
        self._show_table()
        self._redraw()

    @property
    def records(self) -> list[dict[str, Any]]:
        return [dict(record) for record in self._records]

    @property
    def selected(self) -> list[dict[str, Any]]:
        chosen = set(self.runs.value)
        return [record for record in self._records if record["name"] in chosen]

    def select(self, *names: str) -> None:
        unknown = [name for name in names if name not in self.runs.options]
        if unknown:
            raise ValueError(f"no run {unknown[0]!r} here: pick among "
                             f"{', '.join(self.runs.options) or 'none'}")
        self.runs.value = tuple(names)

    def sort(self, column: str, descending: bool = False) -> None:
        self.descending.value = descending
        self.sort_by.value = column

    def rows(self) -> list[dict[str, Any]]:
        """The table's rows in the order shown."""
        return run_table.table(self._records, self.sort_by.value, self.descending.value)[1]

    # -- actions -------------------------------------------------------------------

    def press(self, name: str) -> None:
        """What clicking button `name` does (also for scripts and tests)."""
        chosen = self.selected
        if name != "delete":
            self._delete.disarm()   # another selection disarms too (an observer)
        if len(chosen) != 1:
            self._show(f"select one run (now {len(chosen)}) to see or delete its checkpoints",
                       error=True)
            return
        action = self.actions.get(name)
        if action is None:
            self._show(f"{self.buttons[name].description} is not available here", error=True)
            return
        if name == "delete" and not self._delete.confirmed(chosen[0]["name"]):
            self._show(f"press “{self._delete.armed_label}” to remove {chosen[0]['name']}: its "
                       "record and checkpoints go from disk, for good", error=True)
            return
        try:
            result = action(chosen[0])
        except Exception as error:   # shown in the status line, never raised into the UI
            self._show(f"{self.buttons[name].description} failed: "
                       f"{str(error).strip().splitlines()[0] if str(error).strip() else error!r}",
                       error=True)
            return
        if name == "checkpoints":
            self.detail.children = (result,)
            self._show(f"checkpoints of {chosen[0]['name']}")
        else:
            self._remove(chosen[0])
            self._show(result if isinstance(result, str) and result else
                       f"deleted {chosen[0]['name']}")

    def _remove(self, record: Mapping[str, Any]) -> None:
        self._records = [r for r in self._records if r["name"] != record["name"]]
        self.detail.children = ()
        self.runs.options = [str(r["name"]) for r in self._records]
        self._show_table()
        self._redraw()

    # -- view ----------------------------------------------------------------------

    def _show_table(self) -> None:
        columns, rows = run_table.table(self._records, self.sort_by.value, self.descending.value)
        self.table.value = run_table.table_html(columns, rows, selected=self.runs.value)

    def figure_png(self) -> bytes:
        return render_runs_png(self.selected, self.metric.value)

    def _redraw(self) -> None:
        show_figure(self.image, self.figure_png())
        self._show_table()
        self.redraws += 1

    def static_html(self) -> str:
        """The table and the figure as plain HTML (kept in a saved notebook)."""
        return static_html(self._records, self.runs.value, self.metric.value,
                           sort_by=self.sort_by.value, descending=self.descending.value)

    def _show(self, message: str, error: bool = False) -> None:
        text = html.escape(message)
        self.status.value = f'<span style="color: #b00">{text}</span>' if error else text


def default_selection(records: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
    """The runs drawn when a view opens: the newest few."""
    return tuple(str(record["name"]) for record in records)[-_SHOWN_AT_FIRST:]


def static_html(records: Sequence[Mapping[str, Any]], selected: Sequence[str] | None = None,
                metric: str | None = None, *, sort_by: str | None = None,
                descending: bool = False) -> str:
    """The table and the figure of `selected` runs' `metric` as plain HTML, no widgets."""
    chosen = set(default_selection(records) if selected is None else selected)
    if metric is None:
        metric = monitor_metric(run_table.metric_names(records))
    columns, rows = run_table.table(records, sort_by, descending)
    png = render_runs_png([r for r in records if r["name"] in chosen], metric)
    picture = base64.b64encode(png).decode("ascii")
    return (f'<div class="{STATIC_CLASS}">{_HIDDEN_BESIDE_THE_BROWSER}'
            + run_table.table_html(columns, rows, selected=sorted(chosen))
            + f'<img class="tfmw-runs-figure" width="{shown_width(png)}" '
              f'src="data:image/png;base64,{picture}"/></div>')


STATIC_CLASS = "tfmw-runs-static"
# The static twin shows where the browser cannot (a saved notebook opened without its
# kernel, nbconvert, GitHub); next to a live browser in the same cell it is hidden.
_HIDDEN_BESIDE_THE_BROWSER = (
    f"<style>.jp-Cell:has(.tfmw-runs) .{STATIC_CLASS}, "
    f".cell:has(.tfmw-runs) .{STATIC_CLASS} {{display: none}}</style>")
