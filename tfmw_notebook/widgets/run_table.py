"""The runs table as data: which columns, which rows, in which order, and as HTML.

Pure (no widgets): records in (protocol/records.py), rows out. Each hyperparameter
that differs between the runs is a column; each metric gives its final and best value.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from typing import Any

from ..protocol.records import final_and_best
from .summaries import format_duration, format_value

BASE_COLUMNS = ("name", "outcome", "epochs done", "wall time", "samples/s")
_LEADING_METRICS = ("loss", "val_loss")


def hyperparameters(record: Mapping[str, Any]) -> dict[str, Any]:
    """A record's hyperparameters as one flat dict: the fit's and optimizer's, then the
    sweep's values (named as swept)."""
    found: dict[str, Any] = {}
    given = dict(record.get("hyperparameters") or {})
    config = given.pop("optimizer_config", None) or {}
    found.update(given)
    for key, value in config.items():
        if key not in ("name", "learning_rate") and _is_scalar(value):
            found[f"optimizer.{key}"] = value
    for key, value in (record.get("sweep") or {}).items():
        found[key if key not in found else f"sweep {key}"] = value
    return found


def differing(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """Hyperparameters whose value is not the same in every run (in first-seen order)."""
    flat = [hyperparameters(record) for record in records]
    keys: list[str] = []
    for values in flat:
        keys += [key for key in values if key not in keys]
    if len(records) < 2:
        return []
    return [key for key in keys if len({repr(values.get(key)) for values in flat}) > 1]


def metric_names(records: Sequence[Mapping[str, Any]]) -> list[str]:
    names: list[str] = []
    for record in records:
        names += [name for name in (record.get("history") or {}) if name not in names]
    return sorted(names, key=lambda n: (n not in _LEADING_METRICS,
                                        _LEADING_METRICS.index(n) if n in _LEADING_METRICS
                                        else 0, n))


def row(record: Mapping[str, Any], metrics: Sequence[str]) -> dict[str, Any]:
    """One run's values by column (hyperparameters and metrics all included)."""
    epochs = record.get("epochs") or []
    values: dict[str, Any] = {
        "name": record.get("name"), "outcome": record.get("outcome"),
        "epochs done": (epochs[-1] + 1) if epochs else 0,
        "wall time": record.get("wall_time"), "samples/s": record.get("samples_per_second")}
    values.update(hyperparameters(record))
    history = record.get("history") or {}
    for metric in metrics:
        final, best = final_and_best(list(history.get(metric) or []), metric)
        values[f"{metric} final"], values[f"{metric} best"] = final, best
    return values


def table(records: Sequence[Mapping[str, Any]], sort_by: str | None = None,
          descending: bool = False) -> tuple[list[str], list[dict[str, Any]]]:
    """(columns, rows): the base columns, the differing hyperparameters, the metrics."""
    metrics = metric_names(records)
    columns = list(BASE_COLUMNS) + differing(records)
    columns += [f"{metric} {which}" for metric in metrics for which in ("final", "best")]
    rows = [row(record, metrics) for record in records]
    if sort_by is not None:
        rows = sort_rows(rows, sort_by, descending)
    return columns, rows


def sort_rows(rows: Sequence[dict[str, Any]], column: str,
              descending: bool = False) -> list[dict[str, Any]]:
    """Rows ordered by `column`; runs without a value go last either way."""
    present = [r for r in rows if _sortable(r.get(column))]
    missing = [r for r in rows if not _sortable(r.get(column))]
    numbers = all(isinstance(r[column], (int, float)) for r in present)
    ordered = sorted(present, key=lambda r: r[column] if numbers else str(r[column]),
                     reverse=descending)
    return ordered + missing


def format_cell(column: str, value: Any) -> str:
    if value is None:
        return "–"
    if column == "wall time" and isinstance(value, (int, float)):
        return format_duration(float(value))
    if isinstance(value, (bool, int)):
        return str(value)
    if isinstance(value, float):
        return format_value(value) if column != "samples/s" else f"{value:,.0f}"
    return str(value)


def table_html(columns: Sequence[str], rows: Sequence[Mapping[str, Any]],
               selected: Sequence[str] = ()) -> str:
    """An HTML table (plain markup and inline styles: it renders anywhere)."""
    head = "".join(f'<th style="text-align:left;padding:2px 8px">{html.escape(c)}</th>'
                   for c in columns)
    body = []
    for values in rows:
        mark = ' style="background:#eef5ff"' if values.get("name") in selected else ""
        cells = "".join(f'<td style="padding:2px 8px">'
                        f'{html.escape(format_cell(c, values.get(c)))}</td>' for c in columns)
        body.append(f'<tr class="tfmw-run-row"{mark}>{cells}</tr>')
    return (f'<table class="tfmw-runs-table" style="border-collapse:collapse">'
            f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>")


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float, str))


def _sortable(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))
