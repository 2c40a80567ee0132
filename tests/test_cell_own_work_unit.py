"""What a `%%tfdist` cell run again does not redo: its line's parsing, its source's
transform and compile, the search for the cgroup's OOM counter (issue 55)."""

from __future__ import annotations

import pytest
from tfmw_notebook.cluster.cells import cell_syntax, death_cause
from tfmw_notebook.errors import BadArgument
from tfmw_notebook.magics import tfdist
from tfmw_notebook.magics.parsers import CELL_PARSER

pytestmark = pytest.mark.unit


def test_a_cell_line_is_parsed_once_and_each_run_gets_its_own_copy(monkeypatch):
    parsed = []
    parse = CELL_PARSER.parse_args
    monkeypatch.setattr(CELL_PARSER, "parse_args",
                        lambda args: parsed.append(args) or parse(args))
    line = "--name cached-line-1 --push a b  # a comment"
    first, second = tfdist.cell_arguments(line), tfdist.cell_arguments(line)
    assert len(parsed) == 1 and first == second and first is not second
    assert first.name == "cached-line-1" and first.push == ["a", "b"]
    first.trial_monitor = "val_loss"   # what a sweep does to its copy
    assert not hasattr(tfdist.cell_arguments(line), "trial_monitor")


def test_a_bad_cell_line_is_refused_every_time():
    from IPython.core.error import UsageError

    for _ in range(2):
        with pytest.raises(UsageError, match="--no-such-flag"):
            tfdist.cell_arguments("--no-such-flag")


def test_a_cell_run_again_is_not_transformed_again(monkeypatch):
    transformed = []
    transform = cell_syntax.python_source
    monkeypatch.setattr(cell_syntax, "python_source",
                        lambda cell: transformed.append(cell) or transform(cell))
    cell = "!echo cached-cell-1\nx = 1\n"
    first, second = cell_syntax.checked_source(cell), cell_syntax.checked_source(cell)
    assert first == second and first.text == cell and "system" in first.python
    assert transformed == [cell]
    for _ in range(2):   # a cell that does not compile is refused every time
        with pytest.raises(BadArgument, match="SyntaxError"):
            cell_syntax.checked_source("def cached_cell_2(:\n")
    called = cell_syntax.magics_called(cell_syntax.python_source("%time y = 1\n"))
    called.append("%mutated")
    assert cell_syntax.magics_called(cell_syntax.python_source("%time y = 1\n")) == ["%time"]


def test_the_oom_counter_is_read_from_the_file_found_before(monkeypatch):
    if death_cause.read_oom_count() is None:
        pytest.skip("no readable OOM counter in this process' memory cgroup")
    read = []
    reader = death_cause._read
    monkeypatch.setattr(death_cause, "_read", lambda path: read.append(path) or reader(path))
    assert death_cause.read_oom_count() is not None
    assert len(read) == 1 and "/proc/" not in read[0], read   # no search of /proc/self/cgroup


def test_an_oom_counter_that_went_away_is_searched_for_again(monkeypatch):
    monkeypatch.setattr(death_cause, "_counter_file", ["/nonexistent/memory.events"])
    files = {"/proc/self/cgroup": "0::/job\n", "/sys/fs/cgroup/job/memory.events": "oom_kill 4\n"}
    monkeypatch.setattr(death_cause, "_read", files.get)
    assert death_cause.read_oom_count() == 4
    assert death_cause._counter_file == ["/sys/fs/cgroup/job/memory.events"]
