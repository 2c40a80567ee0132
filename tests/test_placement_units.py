"""Where a launcher is told to put the engines of a shrink (cluster/launch/placement.py):
each of ipyparallel's launchers that spans hosts, configured as docs/several-machines.md's
recipes configure them (a cluster object, nothing started)."""

import ipyparallel as ipp
import pytest
from tfmw_notebook.cluster.launch.placement import placed
from traitlets.config import Config

pytestmark = pytest.mark.unit

LEFT = {"node1": 2, "node3": 2}


def cluster(engines: str, tmp_path, config: Config | None = None) -> ipp.Cluster:
    return ipp.Cluster(engines=engines, config=config or Config(), cluster_id="placement",
                       profile_dir=str(tmp_path))


def test_ssh_gets_the_hosts_and_their_engines(tmp_path):
    assert placed(cluster("ssh", tmp_path), LEFT) == {"engines": LEFT}


def test_slurm_gets_the_nodes_after_the_recipes_own_sbatch_options(tmp_path):
    config = Config()
    config.SlurmLauncher.submit_command = ["sbatch", "--gpus-per-task=1"]
    assert placed(cluster("slurm", tmp_path, config), LEFT) == {"submit_command": [
        "sbatch", "--gpus-per-task=1", "--nodelist=node1,node3", "--nodes=2"]}
    assert placed(cluster("slurm", tmp_path), {"node1": 1}) == {"submit_command": [
        "sbatch", "--nodelist=node1", "--nodes=1"]}


def test_mpi_gets_the_hosts_and_slots_beside_the_recipes_hostfile(tmp_path):
    config = Config()
    config.MPILauncher.mpi_args = ["--hostfile", "/shared/hosts", "-x", "IPP_PROFILE_DIR"]
    assert placed(cluster("mpi", tmp_path, config), LEFT) == {"mpi_args": [
        "--hostfile", "/shared/hosts", "-x", "IPP_PROFILE_DIR", "--host", "node1:2,node3:2"]}


def test_launchers_that_place_engines_themselves_and_no_place_get_nothing(tmp_path):
    assert placed(cluster("local", tmp_path), LEFT) == {}
    assert placed(cluster("slurm", tmp_path), None) == {}
    assert placed(cluster("ssh", tmp_path), {}) == {}
