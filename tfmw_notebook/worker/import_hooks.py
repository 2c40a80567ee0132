"""Run an action on a module right after it is first imported, or now if it already is.

For corrections and patches a worker needs only if a cell uses that library: importing it
at start-up would make every start pay for it (Keras 3: about 1.2 s here).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable
from typing import Any


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds a watched module as the other finders do, and runs its action once the module
    has run (before anything imports names from it, so re-exports bind what the action
    patched)."""

    def __init__(self) -> None:
        self.actions: dict[str, list[Callable[[Any], object]]] = {}

    def find_spec(self, fullname: str, path: Any = None,
                  target: Any = None) -> importlib.machinery.ModuleSpec | None:
        actions = self.actions.pop(fullname, None)
        if actions is None:
            return None
        spec = importlib.util.find_spec(fullname)    # the other finders (this one is done)
        if spec is None:
            # Not installed yet: the action waits for an import that finds it (a cell may
            # `pip install` the module and import it again).
            self.actions[fullname] = actions
            return None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run_module = spec.loader.exec_module

        def run_then_act(module: Any) -> None:
            run_module(module)
            for action in actions:   # in the order they were asked for
                action(module)

        setattr(spec.loader, "exec_module", run_then_act)  # noqa: B010 (mypy: a method)
        return spec


_after_import = _AfterImport()


def when_imported(module_name: str, action: Callable[[Any], object]) -> None:
    """`action(module)` now if `module_name` is imported, else right after it is (never, if
    it never is). Several actions on one module run in the order they were asked for."""
    module = sys.modules.get(module_name)
    if module is not None:
        action(module)
        return
    _after_import.actions.setdefault(module_name, []).append(action)
    if _after_import not in sys.meta_path:
        sys.meta_path.insert(0, _after_import)
