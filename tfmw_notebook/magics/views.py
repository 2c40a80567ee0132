"""`%tfdist history | dashboard | tensorboard | diagnose`: looking at the training."""

from __future__ import annotations

import os

from IPython.core.error import UsageError

from ..widgets import tensorboard_view
from .base import CommandBase


class ViewCommands(CommandBase):

    def _history(self, args):
        store = self.session.history
        if store is None:
            raise UsageError("no training has been recorded yet: run a %%tfdist cell that "
                             "calls fit() or tfdist.report() (with the dashboard on)")
        return store

    def _dashboard(self, args) -> None:
        self.session.preferences.dashboard = args.state == "on"
        print(f"dashboard {args.state} for the next %%tfdist cells")

    def _tensorboard(self, args):
        session, cluster = self.session, self.session.cluster
        known = list(session.tensorboard_dirs)
        if cluster is not None and cluster.size:
            known += self._guarded(cluster.tensorboard_dirs)
        session.tensorboard = self._guarded(lambda: tensorboard_view.shown(
            session.tensorboard, tensorboard_view.logdir_for(args.directory, known,
                                                             cwd=os.getcwd()),
            height=args.height))
        return session.tensorboard

    def _diagnose(self, args):
        cluster = self._require_cluster()
        return self._guarded(lambda: cluster.diagnose(
            model=args.model, data=args.data, batch_size=args.batch_size, steps=args.steps))
