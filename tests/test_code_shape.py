"""The package keeps its shape: rooms by process, small classes and functions.

The import rules themselves are import-linter contracts (pyproject.toml, run by .ci/run).
"""

import ast
import os

import pytest

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]

PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                       "tfmw_notebook")
ROOMS = {"protocol", "cluster", "magics", "widgets", "worker"}
TOP_LEVEL_MODULES = {"__init__.py", "errors.py"}
LONGEST_FUNCTION = 50
LONGEST_CLASS = 250


def _sources():
    for folder, _, names in os.walk(PACKAGE):
        for name in sorted(names):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path) as source:
                    yield os.path.relpath(path, PACKAGE), ast.parse(source.read())


def test_the_top_level_holds_only_the_rooms_and_the_shared_errors():
    entries = {name for name in os.listdir(PACKAGE) if not name.startswith((".", "__pycache__"))}
    modules = {name for name in entries if name.endswith(".py")}
    folders = entries - modules
    assert modules == TOP_LEVEL_MODULES
    assert folders == ROOMS
    for room in ROOMS:
        assert os.path.exists(os.path.join(PACKAGE, room, "__init__.py")), room


def test_no_function_or_class_is_too_long():
    too_long = []
    for path, tree in _sources():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                limit = LONGEST_CLASS if isinstance(node, ast.ClassDef) else LONGEST_FUNCTION
                lines = node.end_lineno - node.lineno + 1
                if lines > limit:
                    too_long.append(f"{path}:{node.lineno} {node.name} ({lines} lines)")
    assert not too_long, too_long


def test_every_module_says_what_it_is_for():
    missing = [path for path, tree in _sources() if not ast.get_docstring(tree)]
    assert not missing, missing


def test_the_engines_modules_are_named_behind_one_door():
    """The notebook names the worker modules it starts or calls into in one module,
    protocol/worker_modules.py; the engine side names the functions a call may reach in one,
    worker/entry.py (by module, relative to its package). A third module naming
    `tfmw_notebook.worker...` in a string fails this."""
    naming = set()
    for path, tree in _sources():
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and "tfmw_notebook.worker" in node.value and " " not in node.value):
                naming.add(path)
    assert naming == {os.path.join("protocol", "worker_modules.py")}, naming
    entries = {path for path, tree in _sources() for node in ast.walk(tree)
               if isinstance(node, (ast.Assign, ast.AnnAssign))
               and "ENTRIES" in ast.unparse(node.targets[0] if isinstance(node, ast.Assign)
                                            else node.target)}
    assert entries == {os.path.join("worker", "entry.py")}, entries
