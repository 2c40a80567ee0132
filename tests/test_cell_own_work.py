"""A trivial cell's own work on the notebook side, counted on real workers (issue 55): what
a cell does not need is not done at every cell, and what a cell must still notice (a
controller gone) it still does."""

from __future__ import annotations

import os
import time

import psutil
import pytest
from tfmw_notebook import TFCluster
from tfmw_notebook.cluster import cell_running
from tfmw_notebook.cluster.cells import cell_watch
from tfmw_notebook.cluster.cells.cell_watch import CellWatch
from tfmw_notebook.errors import NoClusterError, WorkerFailed

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    os.chdir(tmp_path_factory.mktemp("cell-own-work"))
    with TFCluster.start(2, gpus_per_worker=0) as started:
        yield started


def test_cells_back_to_back_connect_to_the_controller_once(cluster, monkeypatch):
    probes = []
    answers = cluster._group.controller_answers
    monkeypatch.setattr(cluster._group, "controller_answers",
                        lambda *args: probes.append(1) or answers(*args))
    monkeypatch.setattr(cell_running, "REPLIES_FRESH_SECONDS", 300.0)   # however slow here
    for _ in range(5):
        cluster.run("pass")
    assert len(probes) <= 1, probes        # each cell connected once before
    monkeypatch.setattr(cell_running, "REPLIES_FRESH_SECONDS", 0.0)
    cluster.run("pass")
    assert len(probes) <= 2 and probes, probes   # with the replies stale, it is checked


def test_a_trivial_cell_is_looked_at_once_when_its_replies_are_in(cluster, monkeypatch):
    # Turns only at the last reply (or a failure): the watch looked at every rank right
    # after sending (nothing there yet), again at the last reply, and once more to drain.
    monkeypatch.setattr(cell_watch, "POLL_SECONDS", 60.0)
    taken_in = []
    take_in = CellWatch._take_in
    monkeypatch.setattr(CellWatch, "_take_in",
                        lambda self, futures: taken_in.append(1) or take_in(self, futures))
    for _ in range(3):
        cluster.run("pass")
    assert len(taken_in) == 3, taken_in


def test_a_broadcast_leaves_no_records_behind_in_the_client(cluster):
    # ipyparallel keeps each broadcast's records (its request's, each engine's output
    # future and metadata) for good: they grew by 3 per engine and cell, 1,220 objects a
    # trivial cell on 12 workers that garbage collections then walk.
    client = cluster._group.client
    cluster.run("pass")

    def kept() -> int:
        return len(client._output_futures) + len(client.metadata) + len(client._futures)

    before = kept()
    for _ in range(20):
        cluster.run("print('out')")
    assert kept() - before <= 3 * (cluster.size + 1), (before, kept())


def test_a_controller_gone_right_after_a_cell_still_ends_the_next(tmp_path):
    # The next cell, within REPLIES_FRESH_SECONDS, does not check the controller before it
    # is sent: the watch names it when no worker is heard from.
    os.chdir(tmp_path)
    with TFCluster.start(1, gpus_per_worker=0) as cluster:
        cluster.run("pass")
        controller = psutil.Process(cluster._group.cluster.controller.pid)
        for process in [controller, *controller.children(recursive=True)]:
            process.kill()
        began = time.monotonic()
        with pytest.raises((WorkerFailed, NoClusterError)) as failed:
            cluster.run("pass")
        assert "controller" in str(failed.value) and "does not answer" in str(failed.value)
        assert time.monotonic() - began < 30.0
