"""tf-keras' automatic backup written by the writer thread (tf_keras_backup_writes.py),
with real tf-keras in one process (a process without a strategy is its own chief).

The values are read when the backup is asked for, the files written and committed later on
the writer thread: the state file names a backup once its files are complete, so a write cut
off there leaves the previous backup named. The real-engine cases (kills, a kill inside the
write, preemption) are in tests/test_exact_resume.py.
"""

import os
import threading

import numpy as np
import pytest
import tf_keras
from tensorflow.python.checkpoint import checkpoint_management
from tf_keras.src.distribute import worker_training_state
from tfmw_notebook.worker.writes import background_writes, tf_keras_backup_writes

pytestmark = pytest.mark.unit

ROWS = np.random.RandomState(0).rand(640, 8).astype("float32")


class Cut(Exception):
    """Stands for the SIGKILL that stops the chief in the middle of a write."""


class StopAt(tf_keras.callbacks.Callback):
    def __init__(self, step):
        super().__init__()
        self.step = step

    def on_train_batch_end(self, batch, logs=None):
        if int(self.model.optimizer.iterations.numpy()) == self.step:
            raise KeyboardInterrupt   # the kernel's interrupt, as a fit sees it


@pytest.fixture(autouse=True)
def patched():
    tf_keras_backup_writes.patch(worker_training_state)
    yield
    background_writes.wait_after_error()


def new_model():
    tf_keras.utils.set_random_seed(1)
    model = tf_keras.Sequential([tf_keras.Input((8,)), tf_keras.layers.Dense(4, activation="relu"),
                                 tf_keras.layers.Dense(1)])
    model.compile(optimizer=tf_keras.optimizers.Adam(0.01), loss="mse")
    return model


def fit(model, folder, *callbacks):
    backup = tf_keras.callbacks.BackupAndRestore(str(folder), save_freq=10)
    model.fit(ROWS, ROWS.sum(axis=1), batch_size=64, epochs=4, shuffle=False, verbose=0,
              callbacks=[backup, *callbacks])
    background_writes.wait()


def interrupted(folder, step):
    model = new_model()
    with pytest.raises(KeyboardInterrupt):
        fit(model, folder, StopAt(step))
    background_writes.wait()
    return model


def test_backups_are_committed_by_the_writer_thread_and_a_resumed_fit_ends_bit_identical(
        tmp_path, monkeypatch):
    committed_on = []
    record_state = checkpoint_management.CheckpointManager._record_state

    def recording(manager):
        committed_on.append(threading.current_thread().name)
        return record_state(manager)
    monkeypatch.setattr(checkpoint_management.CheckpointManager, "_record_state", recording)
    undisturbed = new_model()
    fit(undisturbed, tmp_path / "undisturbed")
    assert not os.path.exists(tmp_path / "undisturbed" / "chief")   # removed at the end
    interrupted(tmp_path / "run", 25)
    assert sorted(os.listdir(tmp_path / "run" / "chief")) == [
        "checkpoint", "ckpt-2.data-00000-of-00001", "ckpt-2.index"]
    resumed = new_model()
    fit(resumed, tmp_path / "run")
    assert set(committed_on) == {background_writes.WRITER_THREAD}, committed_on
    assert int(resumed.optimizer.iterations.numpy()) == 40
    assert all(np.array_equal(a, b) for a, b in zip(undisturbed.get_weights(),
                                                    resumed.get_weights()))


def test_a_write_cut_before_its_state_file_leaves_the_previous_backup_named(
        tmp_path, monkeypatch):
    interrupted(tmp_path, 15)                        # one backup: step 10
    record_state = checkpoint_management.CheckpointManager._record_state

    def cut_after_the_data(manager):
        if manager.latest_checkpoint.endswith("ckpt-2"):
            raise Cut(manager.latest_checkpoint)
        return record_state(manager)
    monkeypatch.setattr(checkpoint_management.CheckpointManager, "_record_state",
                        cut_after_the_data)
    with pytest.raises(Cut):
        interrupted(tmp_path, 25)                    # the step-20 backup's commit is cut
    monkeypatch.undo()
    restored = new_model()
    backup = tf_keras.callbacks.BackupAndRestore(str(tmp_path), save_freq=10)
    backup.set_model(restored)
    backup.on_train_begin()
    assert int(restored.optimizer.iterations.numpy()) == 10


def test_a_backup_holds_the_values_of_the_step_it_was_asked_at(tmp_path):
    model = interrupted(tmp_path, 5)                 # no backup yet: built, trained 5 steps
    backup = tf_keras.callbacks.BackupAndRestore(str(tmp_path), save_freq=10)
    backup.set_model(model)
    backup.on_train_begin()
    asked = [w.copy() for w in model.get_weights()]
    backup._backup(epoch=0, batch=4)
    model.set_weights([w + 1.0 for w in asked])     # training goes on meanwhile
    background_writes.wait()
    restored = new_model()
    restored.build((None, 8))
    again = tf_keras.callbacks.BackupAndRestore(str(tmp_path), save_freq=10)
    again.set_model(restored)
    again.on_train_begin()
    assert all(np.array_equal(a, b) for a, b in zip(asked, restored.get_weights()))


def test_a_queued_write_runs_after_the_one_under_way_without_waiting_for_it():
    release, order = threading.Event(), []
    background_writes.hand_over(lambda: (release.wait(30), order.append("backup")))
    background_writes.hand_over(lambda: order.append("removal"), queued=True)
    assert order == [] and background_writes.in_flight()   # the caller did not wait
    release.set()
    background_writes.wait()
    assert order == ["backup", "removal"]
