"""Keras 3's automatic backup, committed whole: complete or absent whenever a worker dies.

Keras 3's BackupAndRestore writes `latest.weights.h5`, then its metadata, in place. A
worker killed while writing them (a kill, a preemption's SIGKILL, the restart that follows
a peer's death) left a backup that cannot be read; Keras then falls back to its previous
copy (`double_checkpoint`), but the first backup of a fit has none, and the resumed fit
failed on every restart (measured: `OSError: Unable to synchronously open file
(truncated file ...)` on both workers, tests/test_exact_resume.py). Here each file is
written under a temporary name beside it and renamed into place, as the package's own
checkpoints are (checkpointing.py): the resume finds the last complete backup, or none
and starts from the first step.

Installed on every worker, the chief included, before chief_writes.py: its redirection
of a non-chief's backup to a copy of its own then wraps this wrapper, and the paths
renamed are the ones in force when the write runs.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

from ..common.import_hooks import when_imported
from . import chief_writes, keras3_backup_writes, tf_keras_backup_writes

_MARK = "_tfmw_backup_commit"   # set on the wrapper, so nothing is wrapped twice


def install() -> None:
    """Patch Keras 3's BackupAndRestore when it is imported (now, if it was); then the
    backups' writes on the chief's writer thread (keras3_backup_writes.py, which wraps
    this, and tf_keras_backup_writes.py)."""
    when_imported("keras.src.callbacks.backup_and_restore", patch)
    keras3_backup_writes.install()
    tf_keras_backup_writes.install()


def patch(backup_and_restore: Any) -> None:
    """Wrap `BackupAndRestore._save_model` of the module `backup_and_restore` once."""
    cls = backup_and_restore.BackupAndRestore
    original = cls.__dict__.get("_save_model")
    if original is None or getattr(original, _MARK, False):
        return
    wrapper = committed_whole(original)
    setattr(wrapper, _MARK, True)
    cls._save_model = wrapper


def committed_whole(save_model: Callable) -> Callable:
    """`save_model(self)` writing temporary files, each renamed into place after: the
    weights first, so a kill between the two renames leaves new weights with the
    previous metadata (the resume is put at the restored optimizer's step, not the
    metadata's epoch: keras_resume_point.py)."""
    @functools.wraps(save_model)
    def wrapper(self, *args, **kwargs):
        finals = {"_weights_path": self._weights_path,
                  "_training_metadata_path": self._training_metadata_path}
        temps = {name: keras3_backup_writes.temporary(path) for name, path in finals.items()}
        with chief_writes.swapped(self, **temps):
            result = save_model(self, *args, **kwargs)
        for name in ("_weights_path", "_training_metadata_path"):
            if os.path.exists(temps[name]):
                os.replace(temps[name], finals[name])
        return result
    return wrapper
