"""What a %%tfdist cell's IPython syntax turns into, and which magics it calls. Pure.

Workers run cells through their own IPython shell (`!ls`, `%time` work there, as
with ipyparallel's %px), so a cell is checked as IPython transforms it, and its
magics are named so the notebook can refuse those the workers do not have.
"""

from __future__ import annotations

import ast

from IPython.core.inputtransformer2 import TransformerManager

_MAGIC_CALLS = {"run_line_magic": "%", "run_cell_magic": "%%"}


def python_source(cell: str) -> str:
    """The cell as IPython runs it: `!cmd`, `%magic` and `x?` become Python calls."""
    return TransformerManager().transform_cell(cell)


def magics_called(source: str) -> list[str]:
    """'%name' / '%%name' for each magic the transformed `source` calls, in order."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in _MAGIC_CALLS and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)):
            name = _MAGIC_CALLS[node.func.attr] + node.args[0].value
            if name not in found:
                found.append(name)
    return found
