"""The random state a fit draws from, backed up with its weights: a resumed Dropout draws on.

Keras 3's random layers (Dropout, GaussianNoise, random augmentations) draw from
SeedGenerators whose state is a variable of the model but not one of its weights:
BackupAndRestore's `latest.weights.h5` leaves it out, and a resumed fit drew the masks
of its first steps again (a fit killed at step 25, resumed at 20: other weights).
tf-keras' random layers draw from tf.random.Generators where
`enable_tf_random_generator()` was called, and its backup's checkpoint holds none of
them (a layer without weights is not in a Sequential model's checkpoint). By default
they draw from stateful random ops, whose state nothing can save: fits/random_draws.py
says so at the resume.

Each backup also writes those states, in the model's order, to
`random-state-<optimizer step>.npz` in the backup's directory, and the restore gives back
the one of the restored optimizer's step. Named by step: a worker killed between this
file and the weights leaves a newer file than the weights, never a wrong one; the
previous backup's file is kept, since its weights may be the last committed ones.

Installed on every worker after keras3_backup_commit.py (it wraps that wrapper) and
before chief_writes.py, whose redirection of a non-chief's Keras 3 backup to its copy
wraps this: the paths read here are the ones the weights go to or come from.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import os
from collections.abc import Callable
from typing import Any

from ...protocol import checkpoints
from ..common import identity
from ..common.import_hooks import when_imported

_MARK = "_tfmw_random_state"   # set on the wrappers, so nothing is wrapped twice
_PREFIX = "random-state-"

# What the last restore on this worker gave back, for the resume's line
# (fits/random_draws.py): None where no backup was read.
_outcome: str | None = None


def install() -> None:
    """Patch both Kerases' BackupAndRestore when they are imported (now, if they were)."""
    when_imported("keras.src.callbacks.backup_and_restore", _patch_keras3)
    when_imported("tf_keras.src.callbacks", _patch_tf_keras)


def _patch_keras3(module: Any) -> None:
    _wrap(module.BackupAndRestore, "_save_model", _saving(_keras3_folder))
    _wrap(module.BackupAndRestore, "_load_model", _loading(_keras3_folder))


def _patch_tf_keras(module: Any) -> None:
    _wrap(module.BackupAndRestore, "_backup", _saving(_tf_keras_folder))
    _wrap(module.BackupAndRestore, "on_train_begin", _loading(_tf_keras_folder))


def _keras3_folder(callback: Any) -> str:
    return os.path.dirname(callback._weights_path)


def _tf_keras_folder(callback: Any) -> str:
    return callback.backup_dir


def _wrap(cls: type, name: str, wrap: Callable[[Callable], Callable]) -> None:
    """Where this Keras lacks the method, its backup stays as Keras makes it."""
    original = cls.__dict__.get(name)
    if original is None or getattr(original, _MARK, False):
        return
    wrapper = wrap(original)
    setattr(wrapper, _MARK, True)
    setattr(cls, name, wrapper)


def outcome() -> str | None:
    """The resume line's part on random state: what the last restore gave back."""
    return _outcome


def random_variables(model: Any) -> list:
    """The state variables the model's random layers draw from, in the model's order."""
    return checkpoints.random_states(model)


def _saving(folder_of: Callable[[Any], str]) -> Callable:
    """The chief writes the states (every worker restores the chief's backup)."""
    def wrap(save: Callable) -> Callable:
        @functools.wraps(save)
        def wrapper(self, *args, **kwargs):
            step, folder = _step(self.model), folder_of(self)
            if step is None or identity.rank() != 0:
                return save(self, *args, **kwargs)
            states = random_variables(self.model)
            if states:
                _write(folder, step, [state.numpy() for state in states])
            result = save(self, *args, **kwargs)
            _remove_older(folder, keep=step)
            return result
        return wrapper
    return wrap


def _loading(folder_of: Callable[[Any], str]) -> Callable:
    def wrap(load: Callable) -> Callable:
        @functools.wraps(load)
        def wrapper(self, *args, **kwargs):
            global _outcome
            before = _step(self.model)
            result = load(self, *args, **kwargs)
            restored = _step(self.model) != before   # the backup's optimizer was loaded
            _outcome = _restore(self.model, folder_of(self)) if restored else None
            return result
        return wrapper
    return wrap


def _restore(model: Any, folder: str) -> str | None:
    """Assign the states of the restored step; the line that says what was done."""
    import numpy as np

    states = random_variables(model)
    path = os.path.join(folder, f"{_PREFIX}{_step(model)}.npz")
    if not states:
        return None
    if not os.path.exists(path):
        return (f"its random state could not be given back (no copy for step {_step(model)}"
                f" in the backup): its {len(states)} random generators draw from their start")
    with np.load(path) as saved:
        values = [saved[f"{index}"] for index in range(len(saved.files))]
    if [v.shape for v in values] != [tuple(s.shape) for s in states]:
        return ("its random state could not be given back (the backup's random generators "
                "are not this model's): they draw from their start")
    for state, value in zip(states, values):
        state.assign(value)
    return f"its random state given back ({len(states)} random generators)"


def _write(folder: str, step: int, values: list) -> None:
    """`random-state-<step>.npz`, written under a temporary name and renamed into place."""
    import numpy as np

    os.makedirs(folder, exist_ok=True)
    final = os.path.join(folder, f"{_PREFIX}{step}.npz")
    temporary = os.path.join(folder, f".writing-{os.getpid()}-{_PREFIX}{step}.npz")
    with open(temporary, "wb") as stream:
        np.savez(stream, **{f"{index}": value for index, value in enumerate(values)})
    os.replace(temporary, final)


def _remove_older(folder: str, keep: int) -> None:
    """Remove the files of steps before `keep`'s predecessor: the weights of the backup
    before this one may still be the last ones committed (a backup's weights are written
    off the training thread, one write at a time: background_writes.py)."""
    steps = sorted(_saved_steps(folder))
    older = [step for step in steps if step < keep]
    for step in older[:-1]:
        with contextlib.suppress(FileNotFoundError):   # another writer's removal
            os.remove(os.path.join(folder, f"{_PREFIX}{step}.npz"))


def _saved_steps(folder: str) -> list[int]:
    names = (os.path.basename(p) for p in glob.glob(os.path.join(folder, f"{_PREFIX}*.npz")))
    return [int(n[len(_PREFIX):-len(".npz")]) for n in names
            if n[len(_PREFIX):-len(".npz")].isdigit()]


def _step(model: Any) -> int | None:
    iterations = getattr(getattr(model, "optimizer", None), "iterations", None)
    return None if iterations is None else int(iterations.numpy())
