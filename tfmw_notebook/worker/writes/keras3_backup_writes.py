"""Keras 3's automatic backup, written by the chief's writer thread instead of the training
thread of every worker.

Keras 3's BackupAndRestore saves `latest.weights.h5` and its metadata on the training
thread of every worker (the non-chiefs to a copy thrown away, chief_writes.py): ~25 ms a
backup of bench.py's job on 2 cores, most of it Keras' walk over the model's attributes
and h5py, ~0.2 ms of it reading the values. Here every worker reads the values its
weights file holds (the model's weights and its optimizer's variables) at the backup's
step, with the epoch and batch of the metadata; only the chief writes them, on its
writer thread (background_writes.py): Keras' own `save_weights` to a temporary file,
each variable's value taken from those read (the h5 store's `__setitem__` and the
optimizer's `save_own_variables`, on that thread only), then the metadata, each renamed
into place (weights first, as keras3_backup_commit.py does). A worker killed inside a
write leaves the last complete backup. A value the walk stores that was not read at the
step (a layer that saves something other than its variables) discards that write and
writes this fit's later backups as Keras does, inline: a backup is never a mix of two
steps. The backup's removal at the fit's end is queued behind the last write.

Installed after keras3_backup_commit.py (it wraps that wrapper, which writes the
inline backups) and before chief_writes.py and random_state_backup.py, which wrap this.
"""

from __future__ import annotations

import functools
import json
import os
import threading
from collections.abc import Callable
from typing import Any

from ..common import guarded_patches
from ..common.import_hooks import when_imported
from . import background_writes, chief_writes

_MARK = "_tfmw_backup_writes"    # set on the wrappers, so nothing is wrapped twice
_INLINE = "_tfmw_inline"         # set on a BackupAndRestore whose backups are written inline
_read_at_step = threading.local()   # .values: {id(variable): value} while the writer writes
_RISK = "Keras 3's backups are written on the training thread of every worker"


def install() -> None:
    """Patch Keras 3's BackupAndRestore, h5 store and optimizer when they are imported."""
    when_imported("keras.src.saving.saving_lib", patch_store)
    when_imported("keras.src.optimizers.base_optimizer", patch_optimizer)
    when_imported("keras.src.callbacks.backup_and_restore", patch)


def patch_store(saving_lib: Any) -> None:
    store = saving_lib.H5IOStore
    guarded_patches.patch(
        "keras3_backup_writes.store", f"{store.__module__}.H5IOStore.__setitem__",
        lambda: guarded_patches.method(store, "__setitem__", "key", "value"),
        lambda found: _wrap(store, "__setitem__", _stored_as_read(found)),
        library="keras", risk=_RISK)


def patch_optimizer(base_optimizer: Any) -> None:
    """Keras 3's optimizer stores `variable.numpy()`, not the variable: on the writer
    thread, the values read at the step instead."""
    cls = base_optimizer.BaseOptimizer
    guarded_patches.patch(
        "keras3_backup_writes.optimizer", f"{cls.__module__}.BaseOptimizer.save_own_variables",
        lambda: guarded_patches.method(cls, "save_own_variables", "store"),
        lambda found: _wrap(cls, "save_own_variables", _optimizer_as_read(found)),
        library="keras", risk=_RISK)


def patch(backup_and_restore: Any) -> None:
    cls = backup_and_restore.BackupAndRestore
    guarded_patches.patch(
        "keras3_backup_writes", f"{cls.__module__}.BackupAndRestore._save_model/on_train_end",
        lambda: (guarded_patches.method(cls, "_save_model"),
                 guarded_patches.method(cls, "on_train_end")),
        lambda found: _wrap_backup(cls, *found), library="keras", risk=_RISK)


def _wrap_backup(cls: type, save_model: Callable, on_train_end: Callable) -> None:
    _wrap(cls, "_save_model", _written_later(save_model))
    _wrap(cls, "on_train_end", _removed_later(on_train_end))


def _wrap(owner: Any, name: str, wrapper: Callable) -> None:
    if not getattr(owner.__dict__.get(name), _MARK, False):
        setattr(wrapper, _MARK, True)
        setattr(owner, name, wrapper)


def _stored_as_read(setitem: Callable) -> Callable:
    """The store's `store[key] = value`, on the writer thread: the value read at the step
    (given as the variable, or as that value already); anything else is a miss."""
    @functools.wraps(setitem)
    def wrapper(self, key, value):
        read = getattr(_read_at_step, "values", None)
        if read is not None:
            found = read.get(id(value))
            if found is not None:
                value = found
            elif id(value) not in _read_at_step.arrays:
                _read_at_step.missed = True
        return setitem(self, key, value)
    return wrapper


def _optimizer_as_read(save_own_variables: Callable) -> Callable:
    @functools.wraps(save_own_variables)
    def wrapper(self, store):
        read = getattr(_read_at_step, "values", None)
        if read is None or not all(id(v) in read for v in self.variables):
            return save_own_variables(self, store)
        for index, variable in enumerate(self.variables):   # as Keras 3 does, read earlier
            store[str(index)] = read[id(variable)]
        return None
    return wrapper


def _written_later(save_model: Callable) -> Callable:
    @functools.wraps(save_model)
    def wrapper(self, *args, **kwargs):
        if getattr(self, _INLINE, False) or args or kwargs:
            return save_model(self, *args, **kwargs)
        values = _values(self.model)   # on every worker: reads may be collectives
        if not chief_writes.is_chief():
            return None
        metadata = {"epoch": self._current_epoch, "batch": self._last_batch_seen}
        background_writes.hand_over(functools.partial(
            _write, self, values, metadata, self._weights_path, self._training_metadata_path))
        return None
    return wrapper


def _values(model: Any) -> dict[int, Any]:
    """{id(variable): its value now} of what the weights file holds."""
    import numpy as np

    optimizer = getattr(model, "optimizer", None)
    variables = list(model.weights) + list(getattr(optimizer, "variables", None) or [])
    return {id(v): np.array(_numpy(v), copy=True) for v in variables}


def _numpy(variable: Any) -> Any:
    value = getattr(variable, "value", variable)
    return value.numpy() if hasattr(value, "numpy") else value


def _write(backup: Any, values: dict, metadata: dict, weights: str, metadata_path: str) -> None:
    """On the writer thread: the weights of the step and its metadata, each written under
    a temporary name and renamed into place, weights first."""
    temps = [temporary(path) for path in (weights, metadata_path)]
    os.makedirs(os.path.dirname(weights), exist_ok=True)
    _read_at_step.arrays = {id(array) for array in values.values()}
    _read_at_step.values, _read_at_step.missed = values, False
    try:
        backup.model.save_weights(temps[0], overwrite=True)
    finally:
        _read_at_step.values = None
    if _read_at_step.missed:   # read now, not at the step: not a backup
        setattr(backup, _INLINE, True)
        os.remove(temps[0])
        return
    with open(temps[1], "w") as file:
        file.write(json.dumps(metadata))
    os.replace(temps[0], weights)
    os.replace(temps[1], metadata_path)


def _removed_later(on_train_end: Callable) -> Callable:
    """The chief's removal of the backup at the fit's end, after the writes before it."""
    @functools.wraps(on_train_end)
    def wrapper(self, logs=None):
        if not chief_writes.is_chief():
            return on_train_end(self, logs)
        background_writes.hand_over(functools.partial(on_train_end, self, logs), queued=True)
        return None
    return wrapper


def temporary(path: str) -> str:
    """A name beside `path` that Keras 3 still saves to: weights files must end with
    `.weights.h5`. Of this process: two writers never share one."""
    folder, name = os.path.split(path)
    return os.path.join(folder, f".writing-{os.getpid()}-{name.replace('latest', 'next')}")
