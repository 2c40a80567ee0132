"""The pure parts behind the Slurm tests: the recipe reader (docs/several-machines.md), the
batch job an engine reports, the refused-port probe, and the sweep of a killed run's Slurm files."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile

import pytest
from tfmw_notebook.cluster.launch.engines import nothing_listens
from tfmw_notebook.worker.boot import handshake

import sim_slurm
from doc_recipes import Recipe, recipe
from sim_hosts import _owner_tag

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]


def test_the_docs_slurm_row_is_a_whole_recipe():
    found = recipe("Slurm")
    starts = [c for c in found.commands if c.startswith("ipcluster start ")]
    assert len(starts) == 1 and "--engines=slurm" in starts[0] and "--cluster-id=" in starts[0]
    assert any(c.startswith("ipcluster stop --cluster-id=") for c in found.commands)
    assert all(line.startswith("c.SlurmLauncher.") for line in found.config), found.config
    assert any(line.startswith("%tfdist attach --cluster-id ") for line in found.notebook)


def test_sizing_a_recipe_insists_that_what_it_replaces_is_there():
    base = Recipe(["ipcluster start -n 8"], ["c.X.y = 1"], ["%tfdist attach -n 8"])
    assert base.sized({"-n 8": "-n 4"}).notebook == ["%tfdist attach -n 4"]
    with pytest.raises(AssertionError, match="no longer contains '-n 16'"):
        base.sized({"-n 16": "-n 4"})


def test_an_engine_names_the_batch_job_it_runs_in(monkeypatch):
    for variable in ("SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID"):
        monkeypatch.delenv(variable, raising=False)
    assert handshake.batch_job() is None
    monkeypatch.setenv("SLURM_JOB_ID", "12")
    assert handshake.batch_job() == "Slurm job 12"
    assert handshake.describe_engine("127.0.0.1")["batch_job"] == "Slurm job 12"
    assert handshake.own_controller_address() is None   # not an ipyparallel engine here


def test_a_closed_port_on_a_host_that_answers_counts_as_nothing_listening():
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        assert not nothing_listens("127.0.0.1", port)
    assert nothing_listens("127.0.0.1", port)


def test_leftover_slurm_directories_of_dead_owners_are_removed_and_live_ones_kept():
    dead = tempfile.mkdtemp(prefix=sim_slurm.PREFIX)
    live = tempfile.mkdtemp(prefix=sim_slurm.PREFIX)
    try:
        with open(os.path.join(dead, sim_slurm.OWNER_FILE), "w") as f:
            f.write("owner 999999999 1")
        with open(os.path.join(live, sim_slurm.OWNER_FILE), "w") as f:
            f.write(_owner_tag())
        removed = sim_slurm.remove_leftovers()
        assert dead in removed and live not in removed
        assert not os.path.exists(dead) and os.path.exists(live)
    finally:
        for path in (dead, live):
            shutil.rmtree(path, ignore_errors=True)
