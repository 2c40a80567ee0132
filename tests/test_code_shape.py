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
LONGEST_FUNCTION = 40
LONGEST_CLASS = 200


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


WORKER_ROOMS = {"boot", "cells", "fits", "writes", "corrections", "liveness", "experiments",
                "data", "common"}


def test_the_worker_keeps_its_code_in_rooms():
    """The engines' side: only the package's marker and the entry module at its top; each
    room says in its docstring what it holds (pyproject.toml's contracts say what it may
    import)."""
    worker = os.path.join(PACKAGE, "worker")
    entries = {name for name in os.listdir(worker) if not name.startswith((".", "__pycache__"))}
    assert {name for name in entries if name.endswith(".py")} == {"__init__.py", "entry.py"}
    assert entries - {"__init__.py", "entry.py"} == WORKER_ROOMS
    for room in WORKER_ROOMS:
        with open(os.path.join(worker, room, "__init__.py")) as marker:
            assert ast.get_docstring(ast.parse(marker.read())), room


def _module_name(path: str) -> str:
    parts = path[:-len(".py")].split(os.sep)
    return ".".join(["tfmw_notebook", *parts[:-1]] if parts[-1] == "__init__"
                    else ["tfmw_notebook", *parts])


def _imported(module: str, is_package: bool, node: ast.ImportFrom) -> list[str]:
    """The package modules an import names: `from .x import y` may import module x.y."""
    if node.level:
        base = module.split(".")[:len(module.split(".")) - node.level + (1 if is_package else 0)]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    return [target] + [f"{target}.{alias.name}" for alias in node.names]


def _import_graph() -> dict[str, set[str]]:
    trees = {_module_name(path): (path.endswith("__init__.py"), tree)
             for path, tree in _sources()}
    graph: dict[str, set[str]] = {}
    for module, (is_package, tree) in trees.items():
        graph[module] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                graph[module].update(name for name in _imported(module, is_package, node)
                                     if name in trees and name != module)
            elif isinstance(node, ast.Import):
                graph[module].update(alias.name for alias in node.names if alias.name in trees)
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in graph[module]:
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for module in graph:
        if module not in index:
            visit(module)
    return found


def test_no_modules_import_each_other_in_a_circle():
    """Imports inside functions and those for type checking only count too: a circle is
    one whichever line runs first, and for a reader either way."""
    assert _circles(_import_graph()) == []


def test_the_circle_finder_finds_a_circle():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
