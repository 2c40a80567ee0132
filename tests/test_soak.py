"""A short soak (benchmarks/soak.py): 30 cells and 3 restarts in one kernel, and
nothing grows: processes, listening ports, threads, file descriptors, memory, temp files."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))

from soak import HEADER, soak  # noqa: E402

pytestmark = pytest.mark.timeout(600)


def test_thirty_cells_and_three_restarts_leave_nothing_behind(tmp_path):
    rows = []
    # A temp directory of its own: the suite runs another module beside this one.
    temp = tmp_path / "tmp"
    temp.mkdir()
    samples = soak(cells=30, restarts=3, every=10, cwd=str(tmp_path), report=rows.append,
                   temp=str(temp))
    print("\n" + "\n".join(rows))
    assert rows[0] == HEADER
    first, last = samples[0], samples[-1]
    assert last.cells == 30 and last.restarts == 3
    assert last.children == first.children, rows        # every old worker and nanny is gone
    assert last.ports == first.ports, rows
    assert last.threads <= first.threads + 2, rows
    assert last.fds <= first.fds + 10, rows
    assert last.rss_mb - first.rss_mb < 50, rows
    assert last.stale_worker_dirs <= first.stale_worker_dirs, rows
    assert last.loose_autograph_files <= first.loose_autograph_files, rows
