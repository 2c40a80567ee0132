"""Keras 3's automatic backup written by the writer thread (keras3_backup_writes.py), with
real Keras 3 in one process (a process installed as no worker writes as the chief does).

The values are read when the backup is asked for, the files written later on the writer
thread under temporary names and renamed into place; a layer that saves something other
than its variables makes that fit's backups be written inline instead. The real-engine
cases (kills, a kill inside the write, preemption) are in tests/test_exact_resume.py.
"""

import json
import os
import threading

import keras
import numpy as np
import pytest
from keras.src.callbacks import backup_and_restore
from keras.src.optimizers import base_optimizer
from keras.src.saving import saving_lib
from tfmw_notebook.worker.writes import (
    background_writes,
    keras3_backup_commit,
    keras3_backup_writes,
)

pytestmark = pytest.mark.unit


class Cut(Exception):
    """Stands for the SIGKILL that stops the chief in the middle of a write."""


@pytest.fixture(autouse=True)
def patched(monkeypatch):
    """Patched for this test only: the other tests of the process see Keras 3 as it was."""
    for owner, name in ((backup_and_restore.BackupAndRestore, "_save_model"),
                        (backup_and_restore.BackupAndRestore, "on_train_end"),
                        (saving_lib.H5IOStore, "__setitem__"),
                        (base_optimizer.BaseOptimizer, "save_own_variables")):
        monkeypatch.setattr(owner, name, owner.__dict__[name])   # put back after the test
    keras3_backup_commit.patch(backup_and_restore)
    keras3_backup_writes.patch_store(saving_lib)
    keras3_backup_writes.patch_optimizer(base_optimizer)
    keras3_backup_writes.patch(backup_and_restore)
    yield
    background_writes.wait_after_error()


def model_with_backup(folder, *layers):
    model = keras.Sequential([keras.Input((3,)), *layers, keras.layers.Dense(2)])
    model.compile(optimizer="adam", loss="mse")
    model.fit(np.ones((4, 3)), np.ones((4, 2)), verbose=0)   # optimizer built, one step
    backup = backup_and_restore.BackupAndRestore(str(folder), save_freq=1, double_checkpoint=True)
    backup.set_model(model)
    backup._current_epoch, backup._last_batch_seen = 2, 7
    return model, backup


def restored(folder):
    model, backup = model_with_backup(folder / "other")
    backup = backup_and_restore.BackupAndRestore(str(folder), save_freq=1, double_checkpoint=True)
    backup.set_model(model)
    backup.on_train_begin()
    return model


def test_a_backup_is_written_by_the_writer_thread_with_the_values_of_its_step(
        tmp_path, monkeypatch):
    model, backup = model_with_backup(tmp_path)
    written_on = []
    save_weights = keras.Model.save_weights

    def recording(self, *args, **kwargs):
        written_on.append(threading.current_thread().name)
        return save_weights(self, *args, **kwargs)
    monkeypatch.setattr(keras.Model, "save_weights", recording)
    asked = [w.copy() for w in model.get_weights()]
    backup._save_model()
    model.set_weights([w + 1.0 for w in asked])     # training goes on meanwhile
    backup._current_epoch = 3
    background_writes.wait()
    assert written_on == [background_writes.WRITER_THREAD]
    assert sorted(os.listdir(tmp_path)) == ["latest.weights.h5", "training_metadata.json"]
    with open(tmp_path / "training_metadata.json") as file:
        assert json.load(file) == {"epoch": 2, "batch": 7}
    assert all(np.array_equal(a, b) for a, b in zip(asked, restored(tmp_path).get_weights()))


def test_a_write_cut_halfway_leaves_the_last_complete_backup(tmp_path, monkeypatch):
    model, backup = model_with_backup(tmp_path)
    backup._save_model()
    background_writes.wait()
    complete = [w.copy() for w in model.get_weights()]
    save_weights = keras.Model.save_weights

    def cut_halfway(self, filepath, *args, **kwargs):
        save_weights(self, filepath, *args, **kwargs)
        with open(filepath, "r+b") as half:
            half.truncate(os.path.getsize(filepath) // 2)
        raise Cut(filepath)
    monkeypatch.setattr(keras.Model, "save_weights", cut_halfway)
    model.set_weights([w + 1.0 for w in complete])
    backup._save_model()
    with pytest.raises(Cut):
        background_writes.wait()
    monkeypatch.undo()
    assert all(np.array_equal(a, b) for a, b in zip(complete, restored(tmp_path).get_weights()))


class Derived(keras.layers.Layer):
    """Saves a value computed when it is saved, not one of its variables."""

    def build(self, shape):
        self.scale = self.add_weight(shape=(), initializer="ones")

    def call(self, x):
        return x * self.scale

    def save_own_variables(self, store):
        store["0"] = np.asarray(self.scale.numpy())

    def load_own_variables(self, store):
        self.scale.assign(store["0"])


def test_a_layer_saving_other_values_has_its_backups_written_inline(tmp_path):
    model, backup = model_with_backup(tmp_path, Derived())
    backup._save_model()
    background_writes.wait()
    assert not os.path.exists(tmp_path / "latest.weights.h5")   # the mixed write discarded
    assert not [name for name in os.listdir(tmp_path) if name.startswith(".writing-")]
    backup._save_model()                                         # inline from now on
    assert os.path.exists(tmp_path / "latest.weights.h5")


def test_the_removal_at_the_fit_end_comes_after_the_last_write(tmp_path):
    model, backup = model_with_backup(tmp_path)
    backup._save_model()
    backup.on_train_end()
    background_writes.wait()
    assert not os.path.exists(tmp_path)
