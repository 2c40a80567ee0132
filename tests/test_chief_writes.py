"""chief_writes: code that saves from every worker works unchanged, and only the chief's file
counts.

Real TensorFlow, real workers: two plain python processes with TF_CONFIG on localhost, each
creating its MultiWorkerMirroredStrategy first, then `chief_writes.install(is_chief=rank == 0)`,
both in the same working directory, saving to the same relative paths, 20 saves per writer
(tests/two_process_harness.py). Keras 3's callbacks run both by hand on a built model and in
fits, which need the package's Keras 3 corrections (worker/corrections/keras3_corrections.py).
Without the
module these writers fail (measured when it was written: MergeV2Checkpoints NOT_FOUND, h5
`unable to lock file`, corrupt `.keras` zips, crashed Keras 3 fits). With it, each test wants:
no failed save or read-back on either worker, the named paths holding exactly what one process
alone would leave there (nothing of the other worker's, nothing half-written), the other
worker's copies present before `cleanup()` and gone after, and, on a resume, every worker
restoring the chief's checkpoint.

A group of writers shares one pair of processes (TensorFlow's start-up costs ~4 s a pair here).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile

import pytest

from two_process_harness import CHIEF_WRITES, expected_files, foreign_files, list_files, run_pair

ITERATIONS = 20

GROUPS = {
    "tensorflow": ["checkpoint_save", "checkpoint_write", "manager_save", "saved_model_save"],
    "tf_keras": ["tfk_model_save", "tfk_save_weights_h5", "tfk_save_weights_tf",
                 "tfk_model_checkpoint", "tfk_backup_restore"],
    "tf_keras_savedmodel": ["tfk_savedmodel", "tutorial_write_filepath"],
    "keras3": ["k3_model_save", "k3_save_weights", "k3_model_checkpoint", "k3_backup_restore",
               "k3_fit_model_checkpoint"],
}
FIRST_JOB = ["manager_save", "k3_backup_restore", "k3_fit_backup_interrupted"]
NEXT_JOB = ["manager_resume", "k3_backup_resume", "k3_backup_resume_damaged",
            "k3_fit_backup_resume"]


def _outcome(summary: dict) -> str:
    """What to show when a check fails: the ranks' errors, or the tails of their logs."""
    lines = [f"hung={summary['hung']} returncodes={summary['returncodes']}"]
    for rank, result in enumerate(summary["ranks"]):
        if result is None:
            lines.append(f"rank {rank} reported nothing; log tail:\n{summary['logs'][rank]}")
            continue
        for name, outcome in result["scenarios"].items():
            failures = outcome["write_errors"] + outcome["read_errors"]
            if failures:
                lines.append(f"rank {rank} {name}: {failures[:3]}")
    return "\n".join(lines)


def _check_group(summary: dict, scenarios: list[str]) -> None:
    outcome = _outcome(summary)
    assert not summary["hung"] and all(summary["ranks"]), outcome
    for result in summary["ranks"]:
        for name in scenarios:
            assert result["scenarios"][name]["write_errors"] == [], outcome
            assert result["scenarios"][name]["read_errors"] == [], outcome
    named = set(summary["named_files"])
    assert foreign_files(sorted(named)) == []
    expected = set().union(*(expected_files(name, ITERATIONS) for name in scenarios))
    assert named == expected, (sorted(named - expected), sorted(expected - named))
    chief, other = summary["ranks"]
    assert chief["copies_dir"] is None and chief["copies"] == []   # the chief writes as named
    assert other["copies"], "the other worker saved nothing of its own"
    assert not other["copies_left_after_cleanup"]
    assert os.path.dirname(other["copies_dir"]) == other["private_tempdir"]


@pytest.mark.timeout(150)
@pytest.mark.parametrize("group", sorted(GROUPS))
def test_twenty_saves_from_both_workers_leave_only_the_chiefs_files(group, tmp_path):
    scenarios = GROUPS[group]
    summary = run_pair(scenarios, str(tmp_path / "work"), str(tmp_path / "run"),
                       iterations=ITERATIONS, deadline=120)
    _check_group(summary, scenarios)


@pytest.mark.timeout(150)
def test_every_worker_resumes_from_the_chiefs_checkpoint(tmp_path):
    """A later job restores what the chief left (the other worker's copies went with the
    first job): CheckpointManager's latest, and Keras 3 BackupAndRestore's backup, by hand and
    in a fit stopped halfway on every worker; a restored fit that ends removes the backup
    (the chief's by the chief, and each other worker its own copy)."""
    work = str(tmp_path / "work")
    first = run_pair(FIRST_JOB, work, str(tmp_path / "run1"), iterations=ITERATIONS,
                     deadline=120)
    _check_group(first, FIRST_JOB)
    for result in first["ranks"]:
        stopped = result["scenarios"]["k3_fit_backup_interrupted"]["notes"]
        assert stopped["interrupted"] == f"after epoch {ITERATIONS // 2}"
    _damage_a_copy_of_the_backup(os.path.join(work, "backup3"), os.path.join(work, "backup3d"))
    second = run_pair(NEXT_JOB, work, str(tmp_path / "run2"), iterations=ITERATIONS,
                      deadline=120)
    assert not second["hung"] and all(second["ranks"]), _outcome(second)
    for result in second["ranks"]:
        for name in NEXT_JOB:
            outcome = result["scenarios"][name]
            assert outcome["write_errors"] == outcome["read_errors"] == [], _outcome(second)
        manager = result["scenarios"]["manager_resume"]["notes"]
        assert manager == {"latest": "managed/ckpt-20", "restored_step": ITERATIONS}
        backup = result["scenarios"]["k3_backup_resume"]["notes"]
        assert backup == {"initial_epoch": ITERATIONS, "restored_weight": float(ITERATIONS)}
        previous = result["scenarios"]["k3_backup_resume_damaged"]["notes"]
        assert previous == {"initial_epoch": ITERATIONS, "restored_weight": float(ITERATIONS)}
        assert result["scenarios"]["k3_fit_backup_resume"]["notes"]["first_epoch"] == (
            ITERATIONS // 2)
    weights = [result["scenarios"]["k3_fit_backup_resume"]["notes"]["weight"]
               for result in second["ranks"]]
    assert weights[0] == weights[1]
    assert not any(path.startswith("backup3") for path in list_files(work))
    assert not second["ranks"][1]["copies_left_after_cleanup"]


def _damage_a_copy_of_the_backup(backup: str, damaged: str) -> None:
    """`damaged`: the backup kept as the previous one (`.bkp`, double_checkpoint), and its
    latest one cut off mid-write, as a worker stopped while backing up leaves it."""
    os.makedirs(damaged)
    for name in ("latest.weights.h5", "training_metadata.json"):
        shutil.copyfile(os.path.join(backup, name), os.path.join(damaged, name + ".bkp"))
        shutil.copyfile(os.path.join(backup, name), os.path.join(damaged, name))
    with open(os.path.join(damaged, "latest.weights.h5"), "r+b") as weights:
        weights.truncate(100)


# --- the module alone (no TensorFlow) ----------------------------------------------------------


@pytest.fixture
def fresh_module(tmp_path, monkeypatch):
    """A new copy of chief_writes, its temp directory under tmp_path, as on a non-chief
    (set by hand: install() would patch TensorFlow in this process)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    spec = importlib.util.spec_from_file_location("chief_writes_under_test", CHIEF_WRITES)
    module = importlib.util.module_from_spec(spec)
    module.__package__ = "tfmw_notebook.worker.writes"    # its relative imports
    spec.loader.exec_module(module)
    yield module
    module.cleanup()


@pytest.mark.unit
def test_a_copy_is_stable_private_and_gone_after_cleanup(fresh_module, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fresh_module._is_chief = False
    os.makedirs("models")
    copy = fresh_module._write_path("models/m.keras")
    root = fresh_module.copies_dir()
    assert os.path.dirname(root) == str(tmp_path)
    assert copy == os.path.join(root, str(tmp_path / "models" / "m.keras").lstrip(os.sep))
    assert os.path.isdir(os.path.dirname(copy))            # Keras needs the parent to exist
    assert fresh_module._write_path(copy) == copy          # applied twice: the same copy
    assert fresh_module._write_path("models/m.keras") == copy
    assert fresh_module._write_path("ram://m.keras") == "ram://m.keras"
    assert fresh_module._read_path("models/m.keras") == "models/m.keras"   # none written yet
    older = fresh_module._write_path("models/older.keras")   # e.g. listed by a manager
    assert fresh_module._read_path(older) == str(tmp_path / "models" / "older.keras")
    open(copy, "w").close()
    assert fresh_module._read_path("models/m.keras") == copy
    fresh_module.cleanup()
    assert not os.path.exists(root) and fresh_module.copies_dir() is None
    assert fresh_module._read_path("models/m.keras") == "models/m.keras"


@pytest.mark.unit
def test_a_workers_own_temp_directory_is_written_as_named(fresh_module, tmp_path, monkeypatch):
    own = tmp_path / f"tfmw-worker-{os.getpid()}"
    own.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(own))
    fresh_module._is_chief = False
    assert fresh_module._write_path(str(own / "x.keras")) == str(own / "x.keras")
    assert fresh_module._write_path(str(tmp_path / "x.keras")) != str(tmp_path / "x.keras")


@pytest.mark.unit
def test_install_once_per_process(fresh_module):
    finders = list(sys.meta_path)
    fresh_module.install(is_chief=True)       # the chief: nothing is patched
    fresh_module.install(is_chief=True)
    assert sys.meta_path == finders
    assert fresh_module._write_path("a/b") == "a/b"
    with pytest.raises(ValueError, match="is_chief"):
        fresh_module.install(is_chief=False)


@pytest.mark.unit
def test_a_workers_own_workertemp_directory_is_written_as_named(fresh_module, tmp_path):
    """`workertemp_<task_id>` (TensorFlow's `write_filepath`) is this worker's alone: what is
    made, written and removed there stays in one place."""
    fresh_module._is_chief = False
    fresh_module._rank_dir = "workertemp_1"
    own = str(tmp_path / "ckpt" / "workertemp_1" / "ckpt")
    assert fresh_module._write_path(own) == own
    assert fresh_module._write_path(own + "/ckpt-1") == own + "/ckpt-1"
    assert fresh_module._read_path(own) == own
    for shared in ("workertemp_2", "workertemp_10", "workertemp_1x", "my-workertemp_1"):
        path = str(tmp_path / "ckpt" / shared / "ckpt")
        assert fresh_module._write_path(path) != path
