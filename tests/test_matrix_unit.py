"""The support matrix's pure parts (tests/matrix/): its oldest row is what pyproject.toml
allows at least, every row is in docs/installing.md's table, and CI's wait for the oldest
row ends when the row's process has."""

import os
import re
import subprocess
import sys
import time

import pytest
import tomllib

from matrix import ci_wait

pytestmark = pytest.mark.unit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "matrix"))
import run as matrix_run  # noqa: E402  (a script beside ci_wait)


def _pyproject():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as file:
        return tomllib.load(file)["project"]


def _lower_bounds(requirements):
    found = {}
    for requirement in requirements:
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)(?:\[[^]]*\])?>=([0-9.]+)", requirement)
        if match:
            found[match.group(1).lower()] = match.group(2)
    return found


def test_the_oldest_row_is_what_pyproject_allows_at_least():
    project = _pyproject()
    bounds = _lower_bounds([*project["dependencies"],
                            *project["optional-dependencies"]["tensorflow"]])
    pins = dict(pin.split("==") for pin in matrix_run.ROWS["oldest"].pins)
    for name in ("tensorflow", "tf-keras", "ipython", "ipyparallel"):
        assert pins[name].startswith(bounds[name]), (name, pins[name], bounds[name])


def test_a_rows_requirements_are_its_pins_then_the_packages_and_the_smokes():
    wanted = matrix_run.requirements(matrix_run.ROWS["oldest"])
    assert wanted[:6] == list(matrix_run.ROWS["oldest"].pins)
    assert set(_pyproject()["dependencies"]) <= set(wanted)
    assert "nbval>=0.11" in wanted and not any(w.startswith("tensorflow>") for w in wanted)


def test_the_nightly_row_brings_no_stable_release():
    names = {re.split(r"[<>=\[]", w)[0] for w in
             matrix_run.requirements(matrix_run.ROWS["nightly"])}
    assert {"tf-nightly", "tf-keras-nightly", "keras-nightly"} <= names
    assert not names & {"tensorflow", "tf-keras", "keras"}


def test_every_row_is_in_the_installing_pages_table():
    with open(os.path.join(ROOT, "docs", "installing.md")) as page:
        table = page.read().split("| row | TensorFlow |", 1)[1].split("\n\n", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \|", table, flags=re.M)
    assert rows == list(matrix_run.ROWS)


def test_the_wait_ends_when_the_rows_process_has(monkeypatch):
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    assert ci_wait.running(os.getpid())
    child.wait(timeout=30)
    assert not ci_wait.running(child.pid)
    monkeypatch.setenv(ci_wait.VARIABLE, str(child.pid))
    ci_wait.wait_for_matrix_row(object())           # returns at once: the process ended


def test_an_ended_process_not_yet_reaped_is_not_running():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        deadline = time.monotonic() + 30
        while ci_wait.running(child.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not ci_wait.running(child.pid)
        assert os.path.exists(f"/proc/{child.pid}")    # a zombie: its parent has not waited
    finally:
        child.wait(timeout=30)
