"""tf-keras' automatic backup, written by the chief's writer thread instead of the training
thread of every worker.

tf-keras' BackupAndRestore backs up through its WorkerTrainingState: `back_up` saves a
`tf.train.Checkpoint` (the model, its optimizer, the epoch and batch, the train counter)
through a CheckpointManager, on the training thread of every worker, the non-chiefs to a
copy thrown away (measured on bench.py's job, 2 workers on 2 cores: ~35 ms a backup, and
the backup's removal at the fit's end 2-15 ms). Here every worker reads the checkpoint's
values at the backup's step (weights_snapshot.py: where any read across workers happens),
and only the chief writes them, on its writer thread (background_writes.py), committed as
the manager commits: the files `ckpt-N.*`, then the manager's state file naming them
(replaced whole), then the previous backup removed. A worker killed inside a write leaves
the previous complete backup named, which the restart restores. The removal of the
backup when the fit ends is queued behind the last write, the state file removed first,
so that a removal cut short leaves no backup named. Where this TensorFlow cannot take a
snapshot, or tf-keras' parts are not where they were, tf-keras writes as it does.
"""

from __future__ import annotations

import functools
import os
import time
from typing import Any

from ..common import guarded_patches
from ..common.import_hooks import when_imported
from . import background_writes, weights_snapshot

_MARK = "_tfmw_backup_writes"      # set on the wrappers, so nothing is wrapped twice
_STATE_FILE = "checkpoint"         # the CheckpointManager's state file
_installed = False


def install() -> None:
    """Patch tf-keras' WorkerTrainingState when it is imported (now, if it was); once."""
    global _installed
    if not _installed:
        _installed = True
        when_imported("tf_keras.src.distribute.worker_training_state", patch)


def patch(worker_training_state: Any) -> None:
    cls = worker_training_state.WorkerTrainingState
    guarded_patches.patch(
        "tf_keras_backup_writes", f"{cls.__module__}.WorkerTrainingState.back_up/delete_backup",
        lambda: (guarded_patches.method(cls, "back_up", "epoch", "batch"),
                 guarded_patches.method(cls, "delete_backup")),
        lambda found: _wrap(cls, *found), library="tf_keras",
        risk="tf-keras' backups are written on the training thread of every worker")


def _wrap(cls: type, back_up: Any, delete_backup: Any) -> None:
    if getattr(back_up, _MARK, False):
        return
    cls.back_up = _marked(_backing_up(back_up))              # type: ignore[attr-defined]
    cls.delete_backup = _marked(_deleting(delete_backup))    # type: ignore[attr-defined]


def _marked(wrapper: Any) -> Any:
    setattr(wrapper, _MARK, True)
    return wrapper


def _backing_up(back_up: Any) -> Any:
    @functools.wraps(back_up)
    def wrapper(self, epoch, batch=0):
        if not handed_over(self):
            back_up(self, epoch=epoch, batch=batch)
    return wrapper


def handed_over(state: Any) -> bool:
    """Take the backup of `state` (a WorkerTrainingState) now, on every worker, and hand
    its write to the chief's writer thread; False where that cannot be done here."""
    manager = getattr(state, "read_checkpoint_manager", None)
    checkpoint = getattr(manager, "_checkpoint", None)
    prefix = getattr(manager, "_checkpoint_prefix", None)
    if checkpoint is None or prefix is None or not hasattr(manager, "_maybe_delete"):
        return False
    taker = state.__dict__.setdefault("_tfmw_taker", weights_snapshot.SnapshotTaker())
    snapshot = taker.take(state._model, checkpoint)
    if snapshot is None:
        return False
    if getattr(state, "write_checkpoint_manager", None) is manager:   # the chief
        number = state.__dict__.get("_tfmw_number") or _last_number(manager)
        state._tfmw_number = number + 1
        background_writes.hand_over(functools.partial(
            _commit, manager, snapshot, f"{prefix}-{number + 1}"))
    return True


def _last_number(manager: Any) -> int:
    """The highest N of the manager's `ckpt-N` (those of a run before a restart): a new
    backup never writes over the one that stands."""
    numbers = [int(tail) for path in manager._maybe_delete
               if (tail := str(path).rsplit("-", 1)[-1]).isdigit()]
    return max(numbers, default=0)


def _commit(manager: Any, snapshot: weights_snapshot.WeightsSnapshot, prefix: str) -> None:
    """On the writer thread: the checkpoint's files, then the state naming them, then the
    previous one removed (what `CheckpointManager.save` does after its write)."""
    import tensorflow as tf

    tf.io.gfile.makedirs(os.path.dirname(prefix))
    snapshot.write(prefix)
    manager._maybe_delete.pop(prefix, None)
    manager._maybe_delete[prefix] = time.time()
    manager._latest_checkpoint = prefix
    manager._record_state()
    manager._sweep()
    manager._record_state()


def _deleting(delete_backup: Any) -> Any:
    @functools.wraps(delete_backup)
    def wrapper(self):
        manager = getattr(self, "write_checkpoint_manager", None)
        directory = getattr(manager, "directory", None)
        if manager is not getattr(self, "read_checkpoint_manager", None) or not directory:
            return delete_backup(self)   # a non-chief's: tf-keras removes nothing
        background_writes.hand_over(functools.partial(_remove, directory), queued=True)
        return None
    return wrapper


def _remove(directory: str) -> None:
    """The backup's directory, its state file first: nothing names a half-removed backup."""
    import tensorflow as tf

    for remove, path in ((tf.io.gfile.remove, os.path.join(directory, _STATE_FILE)),
                         (tf.io.gfile.rmtree, directory)):
        try:
            remove(path)
        except tf.errors.NotFoundError:
            pass
