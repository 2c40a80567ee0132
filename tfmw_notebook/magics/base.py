"""What every `%tfdist` command group shares: the session, the shell, and the guards.

Each command group (lifecycle.py, cells.py, checkpoint_commands.py, views.py) is a
mixin of TFDistMagics; the commands reach the cluster only through `self.session`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from IPython.core.error import UsageError

from ..cluster.tfcluster import TFCluster
from ..errors import BadArgument
from .session import NotebookSession

T = TypeVar("T")


class CommandBase:
    session: NotebookSession
    shell: Any

    def _require_cluster(self) -> TFCluster:
        cluster = self.session.cluster
        if cluster is None:
            raise UsageError("no cluster is running: start one with `%tfdist start -n 2` "
                             "(or use a running one with `%tfdist attach`)")
        return cluster

    @staticmethod
    def _guarded(action: Callable[[], T]) -> T:
        """Arguments the API refused are the user's input: show them as usage errors."""
        try:
            return action()
        except BadArgument as exc:
            raise UsageError(str(exc)) from None
