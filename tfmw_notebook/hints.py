"""One more line under a worker's error, when the notebook knows the fix. Pure."""

from __future__ import annotations

import re
import types
from typing import Any

_UNDEFINED = re.compile(r"name '([A-Za-z_][A-Za-z0-9_]*)' is not defined")


def missing_name_hint(error_name: str, error_value: str, notebook: dict[str, Any]) -> str | None:
    """For `NameError: name 'x' is not defined` on the workers when the notebook has `x`."""
    if error_name != "NameError":
        return None
    found = _UNDEFINED.search(error_value or "")
    if not found or found.group(1) not in notebook:
        return None
    name = found.group(1)
    value = notebook[name]
    if isinstance(value, types.ModuleType):
        module = value.__name__
        line = f"import {module}" if module == name else f"import {module} as {name}"
        return (f"`{name}` is defined in this notebook but not on the workers: add "
                f"`{line}` to a %%tfdist cell")
    return (f"`{name}` is defined in this notebook but not on the workers: `import` it in a "
            f"%%tfdist cell, or pass `--push {name}`")
