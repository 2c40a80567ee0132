"""The notebook side's one piece of state: this kernel's cluster, last run and preferences.

Owned by the magics (one TFDistMagics per shell); scripts and the picker reach
it through `current_session()`. Importing this module imports nothing heavy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..cluster.runs.tracking import TrackingSettings


@dataclass
class Preferences:
    """What `%tfdist dashboard|checkpointing|restore on|off` chose for later cells."""

    dashboard: bool = True
    checkpointing: bool = True
    restore: bool = True


@dataclass
class NotebookSession:
    cluster: Any = None                  # the TFCluster, while one runs
    history: Any = None                  # the last training cell's MetricsStore
    preferences: Preferences = field(default_factory=Preferences)
    resume_next: str | None = None       # a checkpoint the picker chose for the next cell
    last_run: str | None = None          # the last cell's checkpoint run directory
    tensorboard: Any = None              # the TensorBoardView `%tfdist tensorboard` showed
    tensorboard_dirs: list[str] = field(default_factory=list)  # --tensorboard directories
    tracking: TrackingSettings = field(default_factory=TrackingSettings)  # %tfdist tracking

    def stop_cluster(self) -> None:
        """Stop the cluster and the TensorBoard server we started for it."""
        cluster, self.cluster = self.cluster, None
        board, self.tensorboard = self.tensorboard, None
        if board is not None:
            board.stop()
        if cluster is not None:
            cluster.stop()

    def reset(self) -> None:
        """Back to a new session's state (the cluster is stopped first)."""
        self.stop_cluster()
        self.history, self.resume_next, self.last_run = None, None, None
        self.tensorboard_dirs = []
        self.preferences = Preferences()
        self.tracking = TrackingSettings()


def current_session() -> NotebookSession | None:
    """The session of the running IPython's %tfdist magics, if they are loaded."""
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    shell = get_ipython()
    if shell is None:
        return None
    magics = shell.magics_manager.registry.get("TFDistMagics")
    return getattr(magics, "session", None)


def active_cluster():
    """The cluster `%tfdist start` or `attach` made in this kernel, or None."""
    session = current_session()
    return session.cluster if session is not None else None


def stop_active_cluster() -> None:
    """Stop this kernel's cluster, if the magics started or attached one."""
    session = current_session()
    if session is not None:
        session.stop_cluster()
