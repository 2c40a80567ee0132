"""Keras 3's backup committed whole (worker/writes/keras3_backup_commit.py), with real Keras 3:
a write cut off halfway leaves the last complete backup, or none, never a damaged one.

The cut is made where a SIGKILL would make it: the weights file half written, then the
write stops (an exception here, a dead process on a worker). Before the patch, the cut
first backup was left as `latest.weights.h5` and the next fit's BackupAndRestore raised
OSError (no previous copy to fall back to); the real-engine case is in
tests/test_exact_resume.py.
"""

import os

import keras
import numpy as np
import pytest
from keras.src.callbacks import backup_and_restore
from tfmw_notebook.worker.writes import keras3_backup_commit


class Cut(Exception):
    """Stands for the SIGKILL that stops a worker in the middle of a write."""


def model_with_backup(folder):
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer="adam", loss="mse")
    backup = backup_and_restore.BackupAndRestore(folder, save_freq=1, double_checkpoint=True)
    backup.set_model(model)
    return model, backup


def cut_halfway(model):
    """The model's next save_weights writes its file, cuts it to half, and stops."""
    original = model.save_weights

    def save_weights(filepath, *args, **kwargs):
        original(filepath, *args, **kwargs)
        with open(filepath, "r+b") as half:
            half.truncate(os.path.getsize(filepath) // 2)
        raise Cut(filepath)
    model.save_weights = save_weights


@pytest.fixture(autouse=True)
def patched():
    keras3_backup_commit.patch(backup_and_restore)


def test_a_first_backup_cut_halfway_leaves_none_and_the_next_fit_starts_fresh(tmp_path):
    model, backup = model_with_backup(str(tmp_path))
    cut_halfway(model)
    with pytest.raises(Cut):
        backup._save_model()
    assert not os.path.exists(os.path.join(tmp_path, "latest.weights.h5"))
    fresh, again = model_with_backup(str(tmp_path))
    before = [w.copy() for w in fresh.get_weights()]
    again.on_train_begin()   # raised OSError before: the damaged file, no previous copy
    assert all(np.array_equal(a, b) for a, b in zip(before, fresh.get_weights()))


def test_a_later_backup_cut_halfway_leaves_the_last_complete_one(tmp_path):
    model, backup = model_with_backup(str(tmp_path))
    backup._save_model()
    complete = [w.copy() for w in model.get_weights()]
    model.set_weights([w + 1.0 for w in complete])
    cut_halfway(model)
    with pytest.raises(Cut):
        backup._save_model()
    fresh, again = model_with_backup(str(tmp_path))
    again.on_train_begin()
    assert all(np.array_equal(a, b) for a, b in zip(complete, fresh.get_weights()))


def test_a_whole_write_replaces_the_backup_and_leaves_no_temporary_file(tmp_path):
    model, backup = model_with_backup(str(tmp_path))
    backup._save_model()
    model.set_weights([w + 1.0 for w in model.get_weights()])
    backup._save_model()
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".writing-")]
    fresh, again = model_with_backup(str(tmp_path))
    again.on_train_begin()
    assert all(np.array_equal(a, b) for a, b in zip(model.get_weights(), fresh.get_weights()))
