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

from . import guarded_patches


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
                _act(action, module)

        setattr(spec.loader, "exec_module", run_then_act)  # noqa: B010 (mypy: a method)
        return spec


_after_import = _AfterImport()


def _act(action: Callable[[Any], object], module: Any) -> None:
    """Run `action` on `module`; an exception is recorded as a skipped correction, never
    raised: the import that triggered it is the user's (guarded_patches.py)."""
    owner = (getattr(action, "__module__", None) or "").rsplit(".", 1)[-1]
    name = getattr(action, "__qualname__", None) or repr(action)
    guarded_patches.patch(
        f"{owner}.{name}" if owner else name, module.__name__,
        lambda: module, action, library=module.__name__.split(".")[0],
        risk=f"what it corrects in {module.__name__} may fail on the workers")


def when_imported(module_name: str, action: Callable[[Any], object]) -> None:
    """`action(module)` now if `module_name` is imported, else right after it is (never, if
    it never is). Several actions on one module run in the order they were asked for. An
    action that raises is a skipped correction (guarded_patches.py): the import goes on."""
    module = sys.modules.get(module_name)
    if module is not None:
        _act(action, module)
        return
    _after_import.actions.setdefault(module_name, []).append(action)
    if _after_import not in sys.meta_path:
        sys.meta_path.insert(0, _after_import)
