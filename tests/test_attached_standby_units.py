"""How spares of an attached cluster are launched (cluster/launch/attached_standby.py):
each of ipyparallel's launchers configured as docs/several-machines.md's recipes configure
them (a cluster object, nothing started)."""

import ipyparallel as ipp
import pytest
from tfmw_notebook.cluster.launch.attached_standby import PREIMPORT_COMMAND, spare_launch
from traitlets.config import Config

pytestmark = pytest.mark.unit

OURS = {"TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}
STARTUP = f"--IPEngine.startup_command={PREIMPORT_COMMAND}"


def cluster(engines: str, tmp_path, config: Config | None = None) -> ipp.Cluster:
    return ipp.Cluster(engines=engines, config=config or Config(), cluster_id="spares",
                       profile_dir=str(tmp_path))


def test_the_profiles_engine_arguments_and_environment_come_first(tmp_path):
    config = Config()
    config.SSHEngineSetLauncher.engine_args = ["--log-level=WARN"]
    config.SSHEngineSetLauncher.environment = {"OMP_NUM_THREADS": "4",
                                               "TF_CPP_MIN_LOG_LEVEL": "0"}
    launch = spare_launch(cluster("ssh", tmp_path, config), OURS)
    assert launch == {"engine_args": ["--log-level=WARN", STARTUP],
                      "environment": {"OMP_NUM_THREADS": "4", **OURS}}


def test_mpi_is_told_to_pass_our_variables_to_the_engines_on_other_hosts(tmp_path):
    config = Config()
    config.MPILauncher.mpi_args = ["--hostfile", "/shared/hosts", "-x", "IPP_PROFILE_DIR"]
    launch = spare_launch(cluster("mpi", tmp_path, config), OURS)
    assert launch["mpi_args"] == ["--hostfile", "/shared/hosts", "-x", "IPP_PROFILE_DIR",
                                  "-x", "TF_USE_LEGACY_KERAS", "-x", "TF_CPP_MIN_LOG_LEVEL"]
    assert launch["engine_args"] == [STARTUP]


def test_local_and_slurm_launchers_get_no_mpi_arguments(tmp_path):
    for engines in ("local", "slurm"):
        launch = spare_launch(cluster(engines, tmp_path), OURS)
        assert set(launch) == {"engine_args", "environment"}
        assert launch["environment"] == OURS
