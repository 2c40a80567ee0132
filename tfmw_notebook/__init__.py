"""Multi-worker TensorFlow training from Jupyter.

`%load_ext tfmw_notebook` registers the `%tfdist` magics; `TFCluster` is the
same machinery as a Python API. Importing this package does not import
TensorFlow: only the workers do.
"""

from .cluster.cells.run_settings import RunSettings
from .cluster.runs.runs import Runs, list_runs
from .cluster.tfcluster import RunResult, TFCluster
from .errors import ClusterSetupError, Failure, NoClusterError, TFDistError, WorkerFailed
from .magics.checkpoint_loader import load_into_notebook as load_checkpoint
from .magics.session import active_cluster
from .protocol.checkpoints import list_checkpoints
from .protocol.run_options import BackupPolicy, CellOptions, CheckpointPolicy

__all__ = ["TFCluster", "RunResult", "RunSettings", "CellOptions", "CheckpointPolicy",
           "BackupPolicy", "TFDistError", "ClusterSetupError", "NoClusterError",
           "WorkerFailed", "Failure", "active_cluster", "list_checkpoints", "list_runs", "Runs",
           "load_checkpoint", "load_ipython_extension", "unload_ipython_extension"]
__version__ = "0.1.0"


def load_ipython_extension(ipython) -> None:
    from .magics.tfdist import TFDistMagics

    ipython.register_magics(TFDistMagics(ipython))


def unload_ipython_extension(ipython) -> None:
    from .magics.session import current_session

    session = current_session()
    if session is not None:
        session.reset()  # stops the cluster; a reload starts from a new session
