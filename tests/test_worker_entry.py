"""The door between the notebook and the engines' code, checked without engines.

worker/entry.py names every worker function the notebook may call; the notebook's
side (cluster/cells/worker_calls.py) calls them by those names only. Every name on either
side must match one on the other, and resolving them must not import TensorFlow
(the notebook resolves nothing itself, but an engine imports these modules before
its environment for TensorFlow is in place).
"""

import ast
import json
import os
import subprocess
import sys

import pytest
from tfmw_notebook.worker import entry

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKER_CALLS = os.path.join(ROOT, "tfmw_notebook", "cluster", "cells", "worker_calls.py")
WORKER_DIR = os.path.join(ROOT, "tfmw_notebook", "worker")
# Modules that import TensorFlow by design: the Keras callbacks (imported lazily, through
# keras_callbacks.py) and the engine's start-up, which begins TensorFlow's import at once.
STARTS_TENSORFLOW = {"boot.preimport", "boot.engine_main"}


def run_python(code: str) -> str:
    """`code` in a fresh interpreter (other tests' imports do not count); its stdout."""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=50, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()[-1]


def test_every_entry_resolves_to_a_function_without_importing_tensorflow():
    code = ("import json, sys\n"
            "from tfmw_notebook.worker import entry\n"
            "kinds = {name: callable(entry.resolve(name)) for name in entry.ENTRIES}\n"
            "print(json.dumps([kinds, 'tensorflow' in sys.modules]))")
    kinds, tensorflow_imported = json.loads(run_python(code))
    assert kinds == {name: True for name in entry.ENTRIES}
    assert not tensorflow_imported


def callback_modules() -> set[str]:
    """The worker modules keras_callbacks.py imports (lazily, inside its function), as
    `room.module`."""
    with open(os.path.join(WORKER_DIR, "fits", "keras_callbacks.py")) as source:
        tree = ast.parse(source.read())
    return {f"fits.{node.module}" for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module}


def worker_modules() -> list[str]:
    """Every module of the engines' code, as `room.module` (`entry` at the top)."""
    found = []
    for folder, _, names in os.walk(WORKER_DIR):
        prefix = os.path.relpath(folder, WORKER_DIR).replace(os.sep, ".")
        found += [name[:-3] if prefix == "." else f"{prefix}.{name[:-3]}"
                  for name in names if name.endswith(".py") and name != "__init__.py"]
    return sorted(found)


def test_only_the_callback_modules_import_tensorflow_when_they_load():
    callbacks = callback_modules()
    assert {"fits.keras_reporting", "fits.keras_checkpoint_saver",
            "fits.keras_resume_notice"} <= callbacks
    plain = [name for name in worker_modules() if name not in callbacks | STARTS_TENSORFLOW]
    assert len(plain) > 40 and "cells.cell" in plain
    code = ("import importlib, json, sys\n"
            f"for name in {plain!r}:\n"
            "    importlib.import_module('tfmw_notebook.worker.' + name)\n"
            "    if 'tensorflow' in sys.modules:\n"
            "        print(json.dumps(name))\n"
            "        break\n"
            "else:\n"
            "    print(json.dumps(None))\n")
    assert json.loads(run_python(code)) is None, "this module imports TensorFlow as it loads"


def _string(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def called_entries() -> list[str]:
    """Entry names worker_calls.py passes to the engines, in order of appearance."""
    with open(WORKER_CALLS) as source:
        tree = ast.parse(source.read())
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            method, args = node.func.attr, node.args
            on_self = isinstance(node.func.value, ast.Name) and node.func.value.id == "self"
            if on_self and method in ("each", "_same", "_one") and args and _string(args[0]):
                names.append(_string(args[0]))
            elif on_self and method == "_broadcast" and len(args) >= 2 and _string(args[1]):
                names.append(_string(args[1]))   # (ids, entry, ...)
            elif (method == "apply_async" and len(args) >= 2
                  and isinstance(args[0], ast.Name) and args[0].id == "call"
                  and _string(args[1])):
                names.append(_string(args[1]))
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "entry_call_code" and node.args
                and _string(node.args[0])):
            # A cell's text that calls the entry (diagnose_cell): worker_modules.py writes it.
            names.append(_string(node.args[0]))
    return names


def test_every_call_of_the_notebook_names_an_entry_and_every_entry_is_called():
    names = called_entries()
    assert "run_cell" in names and "diagnose_measure" in names, names
    assert sorted(set(names) - set(entry.ENTRIES)) == [], "calls with no entry"
    assert sorted(set(entry.ENTRIES) - set(names)) == [], "entries nothing calls"
