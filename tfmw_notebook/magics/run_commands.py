"""`%tfdist runs`: compare the recorded runs, open a run's checkpoints, delete a run."""

from __future__ import annotations

import os

from IPython.core.error import UsageError

from ..cluster.runs.runs import Runs, list_runs, static_bundle
from ..protocol import checkpoints
from .base import CommandBase
from .checkpoint_commands import picker_actions


class RunCommands(CommandBase):

    def _runs(self, args):
        root = os.path.abspath(os.path.expanduser(args.root or checkpoints.DEFAULT_ROOT))
        if args.root and not os.path.isdir(root):
            raise UsageError(f"--root {args.root}: no such directory; give the directory "
                             f"that holds the runs (default ./{checkpoints.DEFAULT_ROOT})")
        runs = list_runs(root)
        if args.delete is not None:
            try:
                path = runs.delete(args.delete)
            except ValueError as exc:
                raise UsageError(f"{exc}; nothing was deleted") from None
            if self.session.last_run and os.path.abspath(self.session.last_run) == path:
                self.session.last_run = None
            print(f"deleted run {args.delete}: its record and checkpoints ({path})")
            return None
        if not len(runs):
            print(f"no runs under {root} yet: each fit() in a %%tfdist cell records one")
            return runs
        if getattr(self.shell, "kernel", None) is not None:
            return Runs(runs.root, runs.records(), view=self._runs_view)
        return runs

    def _runs_view(self, runs: Runs):
        from IPython.display import display

        from ..widgets.picker import CheckpointPicker
        from ..widgets.runs_view import RunsView

        actions = picker_actions(self.shell, self.session)

        def show_checkpoints(record):
            found = checkpoints.list_checkpoints(record["run_dir"])
            if not found:
                raise ValueError(f"{record['name']} has no checkpoints (checkpointing was "
                                 "off, or they were deleted)")
            return CheckpointPicker(found, actions, history=record.get("history")).widget

        def delete(record):
            path = runs.delete(record["name"])
            return f"deleted run {record['name']}: its record and checkpoints ({path})"

        view = RunsView(runs.records(), {"checkpoints": show_checkpoints, "delete": delete})
        # The table and figure as an output of their own: what a saved notebook shows
        # where the browser cannot (hidden beside the live browser).
        display(static_bundle(view.static_html()), raw=True)
        return view
