"""What a %%tfdist cell's IPython syntax turns into, and which magics it calls. Pure.

Workers run cells through their own IPython shell (`!ls`, `%time` work there, as
with ipyparallel's %px), so a cell is checked as IPython transforms it, once, before
anything is sent; its magics are named so the notebook can refuse those the
workers do not have.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass

from IPython.core.inputtransformer2 import TransformerManager

from ...errors import BadArgument

_MAGIC_CALLS = {"run_line_magic": "%", "run_cell_magic": "%%"}


@dataclass(frozen=True)
class CellSource:
    """A cell that compiles: `text` as written (what the workers run), `python` as
    IPython transforms it. Made only by `checked_source`."""

    text: str
    python: str


_TRANSFORMS = TransformerManager()   # IPython's defaults, kept: making one took 0.1 ms a cell


def python_source(cell: str) -> str:
    """The cell as IPython runs it: `!cmd`, `%magic` and `x?` become Python calls."""
    return _TRANSFORMS.transform_cell(cell)


def checked_source(cell: str | CellSource) -> CellSource:
    """The cell, if it compiles as IPython transforms it; else BadArgument in one line."""
    if isinstance(cell, CellSource):
        return cell
    if not isinstance(cell, str):
        raise BadArgument(f"Invalid value for argument `source`. Received: source={cell!r}. "
                          "Expected the cell's code as a string")
    return _checked(cell)


# A cell run again is not transformed and compiled again (0.4 ms for 20 lines, measured).
@functools.lru_cache(maxsize=64)
def _checked(cell: str) -> CellSource:
    python = python_source(cell)
    try:
        compile(python, "<tfdist cell>", "exec")
    except SyntaxError as exc:
        where = f"line {exc.lineno}" if exc.lineno else "the cell"
        text = f": {exc.text.strip()}" if exc.text and exc.text.strip() else ""
        raise BadArgument(f"SyntaxError at {where} ({exc.msg}){text}; "
                          "nothing was sent to the workers") from None
    return CellSource(cell, python)


def magics_called(source: str) -> list[str]:
    """'%name' / '%%name' for each magic the transformed `source` calls, in order."""
    return list(_magics_called(source))


@functools.lru_cache(maxsize=64)   # as _checked: 0.15 ms for 20 lines, measured
def _magics_called(source: str) -> tuple[str, ...]:
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in _MAGIC_CALLS and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)):
            name = _MAGIC_CALLS[node.func.attr] + node.args[0].value
            if name not in found:
                found.append(name)
    return tuple(found)
