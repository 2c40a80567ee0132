"""The documentation against the code: the README's size and example, the magics reference
against the argument parsers, the troubleshooting page against the errors the package raises."""

from __future__ import annotations

import ast
import os
import re
import sys

import pytest
from tfmw_notebook.magics import parsers

from test_readme import README, readme_cells

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")
PACKAGE = os.path.join(ROOT, "tfmw_notebook")
sys.path.insert(0, os.path.join(DOCS, "_ext"))

import tfdist_reference  # noqa: E402  (docs/_ext is not a package)


def _read(*parts: str) -> str:
    with open(os.path.join(*parts)) as f:
        return f.read()


def test_the_readme_is_at_most_8_kb():
    assert os.path.getsize(README) <= 8 * 1024


def test_ci_runs_the_readmes_test_command_as_written():
    # The README's second set-up command is what CI runs, word for word.
    commands = re.findall(r"^```bash\n(.*?)\n```$", _read(README), flags=re.S | re.M)
    tests = [c for c in commands if "pytest" in c]
    assert len(tests) == 1, tests
    assert tests[0] in _read(ROOT, ".ci", "run").splitlines()


def test_the_first_training_page_shows_the_readme_example_as_tested():
    page = _read(DOCS, "first-training.md")
    assert re.findall(r"^```python\n(.*?)^```$", page, flags=re.S | re.M) == readme_cells()


# -- the magics reference --------------------------------------------------------------

def _sections(text: str) -> dict[str, str]:
    """The reference page's sections by title (`%tfdist start`, `%%tfdist`, ...)."""
    parts = re.split(r"^## `([^`]+)`\n", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def _rows(section: str) -> dict[str, str]:
    """option cell -> default cell of a section's table."""
    return dict(re.findall(r"^\* - `([^`]+)`\n  - (.*)$", section, flags=re.M))


def _expected_default(default) -> str:
    if default is None or default == [] or default is False:
        return ("not set", "off")
    return f"`{default:g}`" if isinstance(default, float) else f"`{default}`"


def _all_parsers():
    yield "%tfdist", parsers.LINE_PARSER
    for name, parser in parsers.subcommands().choices.items():
        yield f"%tfdist {name}", parser
    yield "%%tfdist", parsers.CELL_PARSER


def test_the_reference_lists_every_option_of_every_parser_with_its_default():
    sections = _sections(tfdist_reference.magics_reference())
    checked = 0
    for title, parser in _all_parsers():
        assert title in sections, f"no section for {title}"
        rows = _rows(sections[title])
        for action in parser._actions:
            if action.dest in ("help", "command"):
                continue
            names = action.option_strings or [action.metavar or action.dest]
            row = [option for option in rows if all(
                re.search(rf"(^|[ ,]){re.escape(name)}([ ,]|$)", option) for name in names)]
            assert len(row) == 1, f"{title}: {names} not in its table ({list(rows)})"
            default = rows[row[0]]
            expected = _expected_default(action.default)
            assert default in expected if isinstance(expected, tuple) else default == expected, (
                f"{title} {names}: default {default!r}, parser says {action.default!r}")
            checked += 1
    assert checked >= 40  # every parser's options were found, not an empty page


def test_the_reference_shows_a_changed_default():
    """The page follows the parser: change a default and the page says the new one."""
    action = next(a for a in parsers.CELL_PARSER._actions if a.dest == "checkpoint_every")
    old = action.default
    try:
        action.default = 7
        rows = _rows(_sections(tfdist_reference.magics_reference())["%%tfdist"])
        assert rows["--checkpoint-every E"] == "`7`"
    finally:
        action.default = old


# -- the troubleshooting page ----------------------------------------------------------

# Exceptions that never reach the user under their own name: the magics and the cluster
# catch them and show what they say in another form.
NOT_SHOWN_BY_NAME = {
    "IsolationUnavailable": "becomes the one-line warning about the host's network",
    "DeviceSplitError": "becomes a ClusterSetupError with its message",
}


def _exception_classes() -> dict[str, str]:
    """Every exception class the package defines -> the file that defines it."""
    found = {}
    for folder, _, files in os.walk(PACKAGE):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                for node in ast.walk(ast.parse(_read(path))):
                    bases = [ast.unparse(base) for base in getattr(node, "bases", [])]
                    if isinstance(node, ast.ClassDef) and any(
                            re.search(r"(Error|Exception|Warning|Failed|Full|Shared)$", base)
                            for base in bases):
                        found[node.name] = os.path.relpath(path, ROOT)
    return found


def test_the_troubleshooting_page_names_every_error_class():
    page = _read(DOCS, "troubleshooting.md")
    classes = _exception_classes()
    assert {"TFDistError", "BadArgument", "ClusterSetupError", "NoClusterError",
            "WorkerFailed", "CheckpointDiskFull", "RunDirNotShared"} <= set(classes)
    for name, path in classes.items():
        if name in NOT_SHOWN_BY_NAME:
            continue
        if path == os.path.join("tfmw_notebook", "errors.py"):
            assert re.search(rf"^#+ `{name}`$", page, flags=re.M), f"no section for {name}"
        else:
            assert f"`{name}" in page, f"{name} ({path}) is not on the troubleshooting page"


def _usage_error_messages() -> list[str]:
    """The longest literal part of each message the magics raise as a UsageError."""
    messages = []
    for folder, _, files in os.walk(os.path.join(PACKAGE, "magics")):
        for name in files:
            if not name.endswith(".py"):
                continue
            for node in ast.walk(ast.parse(_read(folder, name))):
                if (isinstance(node, ast.Call) and ast.unparse(node.func) == "UsageError"
                        and node.args and isinstance(node.args[0], (ast.Constant, ast.JoinedStr))):
                    arg = node.args[0]
                    parts = [arg] if isinstance(arg, ast.Constant) else arg.values
                    texts = [p.value for p in parts if isinstance(p, ast.Constant)]
                    messages.append(max(texts, key=len))
    return messages


def _plain(text: str) -> str:
    return " ".join(text.replace("`", "").split())


def test_the_troubleshooting_page_quotes_every_usage_error_of_the_magics():
    page = _plain(_read(DOCS, "troubleshooting.md"))
    messages = _usage_error_messages()
    assert len(messages) >= 12
    for message in messages:
        assert _plain(message)[:40] in page, f"UsageError {message!r} is not on the page"


def test_every_relative_link_of_the_readme_and_contributing_leads_to_a_file():
    for name in ("README.md", "CONTRIBUTING.md"):
        text = _read(ROOT, name)
        links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
        local = [link for link in links if "://" not in link]
        assert local or name != "README.md"
        for link in local:
            assert os.path.exists(os.path.join(ROOT, link)), f"{name} links to missing {link}"
