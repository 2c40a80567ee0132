"""`%tfdist checkpoints | checkpointing | restore`: the picker and the saving switches.

The picker's actions, bound to this session: restore loads the checkpoint into a
model on every worker; resume makes the next %%tfdist cell continue from it; load
rebuilds the model in this notebook; delete removes it from disk.
"""

from __future__ import annotations

import os

from IPython.core.error import UsageError

from ..errors import called_from_magic
from ..protocol import checkpoints
from ..protocol.checkpoints import CheckpointInfo
from .base import CommandBase
from .checkpoint_loader import load_into_notebook
from .session import NotebookSession


class CheckpointCommands(CommandBase):

    def _checkpointing(self, args) -> None:
        self.session.preferences.checkpointing = args.state == "on"
        print(f"automatic checkpoints {args.state} for the next %%tfdist cells")

    def _restore(self, args) -> None:
        preferences = self.session.preferences
        preferences.restore = args.state == "on"
        if self.session.cluster is not None:
            self.session.cluster.restore_state = preferences.restore
        if preferences.restore:
            print("restore on: after a restart the earlier %%tfdist cells are replayed, each "
                  "fit() restored from the state it ended with")
        else:
            print("restore off: a restart leaves fresh workers; fit() keeps no end-of-fit state")

    def _checkpoints(self, args) -> None:
        return show_checkpoints(self.shell, args.directory, self.session)


def find_run(directory: str | None, last_run: str | None) -> str:
    """The run to show: the one named, else this session's last, else the newest."""
    if directory:
        path = os.path.abspath(os.path.expanduser(directory))
        if not os.path.exists(path) and not os.path.isabs(directory):
            path = os.path.abspath(os.path.join(checkpoints.DEFAULT_ROOT, directory))
        if not os.path.isdir(path):
            runs = [os.path.basename(run) for run in
                    checkpoints.list_runs(os.path.abspath(checkpoints.DEFAULT_ROOT))]
            where = (f"runs under ./{checkpoints.DEFAULT_ROOT}: {', '.join(runs)}" if runs
                     else f"e.g. {checkpoints.DEFAULT_ROOT}/run-...")
            raise ValueError(f"{directory} is not a directory: give a run directory ({where})")
        return path
    if last_run and os.path.isdir(last_run):
        return last_run
    runs = checkpoints.list_runs(os.path.abspath(checkpoints.DEFAULT_ROOT))
    if not runs:
        raise ValueError(f"no checkpoints under ./{checkpoints.DEFAULT_ROOT}: train in a "
                         "%%tfdist cell first (fit() saves every epoch), or name a run directory")
    return runs[0]


def picker_actions(shell, session: NotebookSession) -> dict:
    """What the picker's buttons do, each returning the line it shows."""
    def restore(info: CheckpointInfo, model_name: str) -> str:
        cluster = session.cluster
        if cluster is None:
            raise ValueError("no cluster is running: `%tfdist start` it, build the model, "
                             "then restore")
        with called_from_magic():   # the picker is the magic's: its errors say magics
            digests = cluster.restore_checkpoint(info.path, model_name)
        return f"restored {info.name} into {model_name!r} on {len(digests)} workers"

    def resume(info: CheckpointInfo) -> str:
        session.resume_next = info.path
        return f"the next %%tfdist cell's fit() resumes from {info.name} (epoch {info.epoch})"

    def load(info: CheckpointInfo) -> str:
        shell.user_ns["checkpoint_model"] = load_into_notebook(info.path)
        return f"loaded {info.name} into `checkpoint_model` in this notebook"

    def delete(info: CheckpointInfo) -> str:
        checkpoints.delete_checkpoint(info)
        return f"deleted {info.name}"

    return {"restore": restore, "resume": resume, "load": load, "delete": delete}


def show_checkpoints(shell, directory: str | None, session: NotebookSession) -> None:
    """The picker for a run, its buttons bound to this notebook `session`."""
    try:
        run_dir = find_run(directory, session.last_run)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    found = checkpoints.list_checkpoints(run_dir)
    if getattr(shell, "kernel", None) is None:
        print(f"{run_dir}:")
        for info in found:
            metrics = " ".join(f"{k} {v:.4g}" for k, v in info.metrics.items())
            print(f"  {info.name}  epoch {info.epoch}  step {info.step}  {metrics}")
        return

    from IPython.display import display

    from ..widgets.picker import CheckpointPicker

    display(CheckpointPicker(found, picker_actions(shell, session)).widget)
