"""The sweep's table: one row per trial, updated in place as trials start and end.

Pure data in (the trials' records, sweep.py's `Trial.record`). In a notebook it is
an HTML output updated through its display id, so the saved notebook keeps the last
state as it is (no widget state needed); in a terminal each finished trial prints a
line.
"""

from __future__ import annotations

import html
import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any

_COLOURS = {"completed": "#2e7d32", "pruned": "#8d6e00", "failed": "#c62828",
            "interrupted": "#6a1b9a", "running": "#1565c0"}


def _number(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _outcome(row: Mapping[str, Any]) -> str:
    outcome = row["outcome"]
    if outcome == "pruned" and row.get("pruned_at"):
        return f"pruned at epoch {row['pruned_at']}"
    if outcome in ("failed", "interrupted") and row.get("error"):
        # "worker 1 failed: ValueError: ..." reads "failed on worker 1: ValueError: ..."
        error = re.sub(r"^worker (\d+) failed: ", r"on worker \1: ", row["error"])
        return f"{outcome} {error}" if error.startswith("on worker") else f"{outcome}: {error}"
    return outcome


def table_html(rows: Sequence[Mapping[str, Any]], *, metric: str, caption: str = "",
               footer: str = "") -> str:
    """The table as HTML: trial, each swept name, final and best `metric`, outcome."""
    names = list(dict.fromkeys(name for row in rows for name in row["values"]))
    head = ["trial", *names, f"final {metric}", f"best {metric}", "outcome"]
    lines = ['<table class="tfdist-sweep" style="border-collapse:collapse">']
    if caption:
        lines.append(f"<caption style='text-align:left'>{html.escape(caption)}</caption>")
    header = "<th style='padding:2px 8px;text-align:left'>"
    lines.append("<tr>" + "".join(f"{header}{html.escape(h)}</th>" for h in head) + "</tr>")
    for row in rows:
        cells = [str(row["trial"]), *(_number(row["values"].get(n)) for n in names),
                 _number(row.get("final")), _number(row.get("best"))]
        colour = _COLOURS.get(row["outcome"], "inherit")
        lines.append("<tr>" + "".join(f"<td style='padding:2px 8px'>{html.escape(c)}</td>"
                                      for c in cells)
                     + f"<td style='padding:2px 8px;color:{colour}'>"
                     + f"{html.escape(_outcome(row))}</td></tr>")
    lines.append("</table>")
    if footer:
        lines.append(f"<p>{html.escape(footer)}</p>")
    return "\n".join(lines)


def trial_line(row: Mapping[str, Any], metric: str) -> str:
    """'trial 2 (lr=0.01, batch=64): completed, final loss 0.31, best 0.29'"""
    values = ", ".join(f"{k}={_number(v)}" for k, v in row["values"].items())
    line = f"trial {row['trial']} ({values}): {_outcome(row)}"
    if row.get("final") is not None:
        line += f", final {metric} {_number(row['final'])}, best {_number(row.get('best'))}"
    return line


class SweepTable:
    """Shown when the first trial starts; `update` redraws it, `finish` adds the footer."""

    def __init__(self, *, rich: bool, caption: str = ""):
        self._rich, self.caption = rich, caption
        self._handle = None
        self._printed: set[int] = set()
        self.metric = ""

    def update(self, rows: Sequence[Mapping[str, Any]], metric: str, footer: str = "") -> None:
        """Redraw with `rows`; `footer` (the best trial) once the sweep has ended."""
        self.metric = metric
        if not self._rich:
            self._print_finished(rows, footer)
            return
        from IPython.display import HTML, display

        view = HTML(table_html(rows, metric=self.metric, caption=self.caption,
                               footer=footer))
        if self._handle is None:
            self._handle = display(view, display_id=True)
        else:
            self._handle.update(view)

    def _print_finished(self, rows, footer: str) -> None:
        for row in rows:
            if row["outcome"] != "running" and row["trial"] not in self._printed:
                self._printed.add(row["trial"])
                print(f"tfdist: {trial_line(row, self.metric)}", file=sys.stderr)
        if footer:
            print(f"sweep: {footer}")
