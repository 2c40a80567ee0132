"""The random-state files of the automatic backup (writes/random_state_backup.py), without
a cluster: which files a backup keeps, and what a restore says when its step's is missing."""

import numpy as np
from tfmw_notebook.worker.writes import random_state_backup as backup


class State:
    """A variable as the restore sees one: a shape, a value, assign."""

    def __init__(self, value):
        self.value = np.asarray(value)
        self.shape = self.value.shape

    def assign(self, value):
        self.value = np.asarray(value)


class Step:
    def __init__(self, step):
        self.step = step

    def numpy(self):
        return np.int64(self.step)


class Model:
    def __init__(self, step, states):
        self.optimizer = type("Optimizer", (), {"iterations": Step(step)})()
        self.states = states


def restore(monkeypatch, folder, model):
    monkeypatch.setattr(backup, "random_variables", lambda m: m.states)
    return backup._restore(model, str(folder))


def test_a_backup_keeps_its_own_file_and_the_previous_backups(tmp_path):
    for step in (10, 20, 30):
        backup._write(str(tmp_path), step, [np.array([1, step])])
        backup._remove_older(str(tmp_path), keep=step)
    # The weights of step 30 may still be on the writer thread: step 20's are the last
    # committed, and its random state must be there for them.
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "random-state-20.npz", "random-state-30.npz"]


def test_the_restore_gives_back_the_restored_steps_states(tmp_path, monkeypatch):
    backup._write(str(tmp_path), 20, [np.array([7, 20]), np.array([8, 20])])
    states = [State([7, 0]), State([8, 0])]
    said = restore(monkeypatch, tmp_path, Model(20, states))
    assert said == "its random state given back (2 random generators)"
    assert [list(s.value) for s in states] == [[7, 20], [8, 20]]


def test_a_missing_or_foreign_file_is_said_and_nothing_assigned(tmp_path, monkeypatch):
    backup._write(str(tmp_path), 30, [np.array([7, 30])])
    states = [State([7, 0])]
    said = restore(monkeypatch, tmp_path, Model(20, states))
    assert said.startswith("its random state could not be given back (no copy for step 20")
    said = restore(monkeypatch, tmp_path, Model(30, [State([1, 2, 3])]))
    assert "are not this model's" in said
    assert list(states[0].value) == [7, 0]
