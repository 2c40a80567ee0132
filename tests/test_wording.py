"""Errors name what the caller typed: API calls for the Python API, magics for magics."""

import ast
import pathlib

import pytest
from tfmw_notebook.cluster.tfcluster import TFCluster
from tfmw_notebook.errors import NoClusterError, called_from_magic, magic_words
from tfmw_notebook.magics.session import NotebookSession

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "tfmw_notebook"


@pytest.mark.parametrize("api, magic", [
    ("run `cluster.restart()` or `TFCluster.start()`", "run `%tfdist restart` or `%tfdist start`"),
    ("then `TFCluster.attach(url_file='/p/c.json')`", "then `%tfdist attach --url-file /p/c.json`"),
    ("`TFCluster.start(isolate=False)` accepts", "`%tfdist start --no-isolation` accepts"),
    ("the cell ran past `timeout=5` s", "the cell ran past --timeout 5 s"),
    ("raise `timeout=`, or", "raise --timeout, or"),
    ("(`StallLimits(timeout=10)`)", "(--stall-timeout 10)"),
    ("pass `cluster_id=` / `url_file=`", "pass --cluster-id / --url-file"),
    ("Received: timeout=-1. Expected", "Received: timeout=-1. Expected"),
])
def test_api_words_become_magic_words(api, magic):
    assert magic_words(api) == magic


def test_the_api_caller_reads_api_calls_and_the_magic_caller_magics():
    cluster = TFCluster(group=None)   # no workers: every call refuses before the group
    with pytest.raises(NoClusterError) as api:
        cluster.push({"x": 1})
    assert "`cluster.restart()` or `TFCluster.start()`" in str(api.value)
    assert "%tfdist" not in str(api.value)
    with called_from_magic(), pytest.raises(NoClusterError) as magic:
        cluster.push({"x": 1})
    assert "`%tfdist restart` or `%tfdist start`" in str(magic.value)


def test_a_magic_on_an_emptied_cluster_names_magics(terminal_shell, monkeypatch):
    magics = terminal_shell.magics_manager.registry["TFDistMagics"]
    monkeypatch.setattr(magics, "session", NotebookSession())
    magics.session.cluster = TFCluster(group=None)
    with pytest.raises(NoClusterError, match=r"run `%tfdist restart` or `%tfdist start`"):
        terminal_shell.run_cell_magic("tfdist", "", "x = 1")
    assert magics.session.cluster is not None   # the refusal lost nothing


def _messages(path: pathlib.Path):
    """String literals of a module that are not docstrings."""
    tree = ast.parse(path.read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                       ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    for node in ast.walk(tree):
        if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                and id(node) not in docstrings):
            yield node.lineno, node.value


def test_the_api_layer_words_its_messages_as_api_calls():
    # errors.py's translation table names magics, and `ipcluster start` has flags: not
    # messages in magic words.
    modules = sorted((PACKAGE / "cluster").glob("*.py"))
    found = [f"{path.name}:{line}: {text!r}" for path in modules
             for line, text in _messages(path)
             if "%tfdist" in text or any(flag in text for flag in (
                 "--timeout", "--stall-timeout", "--url-file", "--no-isolation",
                 "--max-restarts"))]
    assert found == []
