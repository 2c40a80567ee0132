"""The pure mapping from %%tfdist flags to what the workers' Keras calls get."""

import json
import os
import re

import pytest
from IPython.core.error import UsageError
from tfmw_notebook.magics import cell_options
from tfmw_notebook.magics.parsers import CELL_PARSER
from tfmw_notebook.protocol import checkpoints
from tfmw_notebook.protocol.run_options import BackupPolicy, CellOptions, CheckpointPolicy

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]


def build(line, tmp_path, **settings):
    args = CELL_PARSER.parse_args(line.split())
    kwargs = {"dashboard": True, "checkpointing": True, "resume_next": None}
    kwargs.update(settings)
    return cell_options.build(args, cwd=str(tmp_path), **kwargs)


def make_checkpoint(run_dir, epoch):
    path = os.path.join(run_dir, f"ckpt-{epoch:06d}")
    os.makedirs(path)
    with open(os.path.join(path, "meta.json"), "w") as meta:
        json.dump({"epoch": epoch, "step": epoch * 10, "metrics": {"loss": 1.0 / epoch}}, meta)
    return path


def test_defaults_report_and_checkpoint_every_epoch_in_a_new_run(tmp_path):
    options, run_dir = build("", tmp_path)
    assert options.report and options.quiet_progress
    assert run_dir.startswith(str(tmp_path / "tfdist_checkpoints" / "run-"))
    assert options.checkpoint == CheckpointPolicy(run_dir=run_dir, every=1, keep_last=None,
                                                  keep_best=None, monitor="val_loss", mode="auto")
    assert options.backup is None and options.resume_from is None


def test_switches_turn_things_off(tmp_path):
    options, run_dir = build("--no-checkpoint --no-dashboard --raw-progress", tmp_path)
    assert options.checkpoint is None and run_dir is None
    assert not options.report and not options.quiet_progress
    options, _ = build("", tmp_path, dashboard=False, checkpointing=False)
    assert not options.report and options.checkpoint is None


def test_max_restarts_adds_a_backup_inside_the_run(tmp_path):
    options, run_dir = build("--max-restarts 2 --backup-every 30 --checkpoint-dir mine", tmp_path)
    assert run_dir == str(tmp_path / "mine")
    assert options.backup == BackupPolicy(directory=str(tmp_path / "mine" / "backup"),
                                          save_freq=30)


def test_backup_every_alone_writes_the_backup_a_rerun_resumes_from(tmp_path):
    """It was dropped without a word: no backup, and the rerun trained from step 0."""
    options, run_dir = build("--backup-every 5 --no-checkpoint --checkpoint-dir mine", tmp_path)
    assert run_dir == str(tmp_path / "mine") and options.checkpoint is None
    assert options.backup is not None and options.backup.save_freq == 5
    assert options.backup.directory == str(tmp_path / "mine" / "backup")
    default, _ = build("--max-restarts 1", tmp_path)
    assert default.backup is not None and default.backup.save_freq == "epoch"


def test_resume_from_latest_continues_that_run(tmp_path):
    run = tmp_path / "tfdist_checkpoints" / "run-1"
    make_checkpoint(str(run), 1)
    latest = make_checkpoint(str(run), 2)
    options, run_dir = build("--resume-from latest", tmp_path)
    assert options.resume_from == latest
    assert run_dir == str(run)


def test_picker_choice_applies_unless_the_cell_names_one(tmp_path):
    run = tmp_path / "r"
    first = make_checkpoint(str(run), 1)
    second = make_checkpoint(str(run), 2)
    assert build("", tmp_path, resume_next=first)[0].resume_from == first
    assert build(f"--resume-from {second}", tmp_path, resume_next=first)[0].resume_from == second


def test_resume_from_nothing_says_how_to_get_a_checkpoint(tmp_path):
    with pytest.raises(ValueError, match="no checkpoint"):
        build("--resume-from latest", tmp_path)


@pytest.mark.parametrize("line, message", [
    ("--backup-every 0", "number of steps >= 1"),
    ("--backup-every often", "'epoch' or a number of steps"),
    ("--keep-last 0", "expected a whole number >= 1, got 0"),
    ("--max-restarts -1", "expected 0 or more"),
    ("--monitor-mode up", "invalid choice: 'up'"),
])
def test_bad_flags_are_usage_errors(line, message):
    with pytest.raises(UsageError, match=message):
        CELL_PARSER.parse_args(line.split())


@pytest.mark.parametrize("make, message", [
    (lambda: CheckpointPolicy(run_dir=""), "`run_dir`. Received: run_dir=''"),
    (lambda: CheckpointPolicy(run_dir="r", every=0), "`every`. Received: every=0. Expected an "
                                                     "integer >= 1"),
    (lambda: CheckpointPolicy(run_dir="r", keep_last=True), "`keep_last`"),
    (lambda: CheckpointPolicy(run_dir="r", mode="up"), "`mode`. Received: mode='up'"),
    (lambda: BackupPolicy(directory="b", save_freq=0), "`save_freq`"),
    (lambda: BackupPolicy(directory="b", save_freq="often"), "`save_freq`"),
    (lambda: CellOptions(report="yes"), "`report`. Received: report='yes'. Expected True or False"),
    (lambda: CellOptions(checkpoint={"run_dir": "r"}), "a CheckpointPolicy or None"),
    (lambda: CellOptions(tensorboard=""), "`tensorboard`. Received: tensorboard=''"),
])
def test_options_check_their_values_where_they_are_made(make, message):
    with pytest.raises(ValueError, match=re.escape(message)) as raised:
        make()
    assert str(raised.value).startswith("Invalid value for argument `")


def test_api_users_build_the_same_options_as_the_magic(tmp_path):
    options, run_dir = build("--keep-last 2 --checkpoint-every 3", tmp_path)
    assert options == CellOptions(report=True, quiet_progress=True,
                                  checkpoint=CheckpointPolicy(run_dir=run_dir, every=3,
                                                              keep_last=2))


def test_ipython_syntax_is_transformed_and_its_magics_named():
    from tfmw_notebook.cluster.cells.cell_syntax import magics_called, python_source

    source = python_source("!ls /tmp\n%time y = 1\nx = 2\n")
    assert "get_ipython().system('ls /tmp')" in source
    assert magics_called(source) == ["%time"]
    assert magics_called(python_source("%%time\nx = 1\n")) == ["%%time"]
    assert magics_called(python_source("x = 1\n")) == []


def test_tensorboard_flag_names_a_directory_next_to_the_run(tmp_path):
    options, run_dir = build("", tmp_path)
    assert options.tensorboard is None
    options, run_dir = build("--tensorboard", tmp_path)
    assert options.tensorboard == os.path.join(str(tmp_path), "tfdist_tensorboard",
                                               os.path.basename(run_dir))
    options, _ = build("--tensorboard --no-checkpoint", tmp_path)
    assert os.path.basename(options.tensorboard).startswith("run-")
    options, _ = build("--tensorboard logs/a", tmp_path)
    assert options.tensorboard == os.path.join(str(tmp_path), "logs", "a")


def test_tensorboard_view_picks_the_directory_to_show(tmp_path):
    from tfmw_notebook.errors import BadArgument
    from tfmw_notebook.widgets.tensorboard_view import logdir_for

    one, two = tmp_path / "tb" / "run-1", tmp_path / "tb" / "run-2"
    one.mkdir(parents=True)
    two.mkdir()
    assert logdir_for(None, [str(one)], cwd="/") == str(one)
    assert logdir_for(None, [str(one), str(two), str(one)], cwd="/") == str(tmp_path / "tb")
    assert logdir_for("tb", [str(one)], cwd=str(tmp_path)) == str(tmp_path / "tb")
    with pytest.raises(BadArgument, match="no TensorBoard logs yet: train in a "):
        logdir_for(None, [], cwd="/")
    with pytest.raises(BadArgument, match="no TensorBoard logs in .*nowhere: it is not a "):
        logdir_for("nowhere", [], cwd=str(tmp_path))


@pytest.mark.parametrize("monitor, mode", [
    ("accuracy", "max"), ("val_accuracy", "max"), ("acc", "max"), ("val_acc", "max"),
    ("sparse_categorical_accuracy", "max"), ("auc", "max"), ("val_auc_1", "max"),
    ("precision", "max"), ("val_recall", "max"), ("f1_score", "max"), ("mean_iou", "max"),
    ("fmeasure", "max"), ("fmeasure_micro", "max"), ("r2_score", "max"),
    ("loss", "min"), ("val_loss", "min"), ("mae", "min"), ("val_mean_squared_error", "min"),
    ("my_own_metric", "min"),
])
def test_monitor_mode_is_inferred_as_keras_infers_it(monitor, mode):
    from tfmw_notebook.protocol.checkpoints import monitor_mode

    assert monitor_mode(monitor) == mode


def test_keep_best_by_val_accuracy_keeps_the_highest(tmp_path):
    options, run_dir = build("--keep-best 2 --monitor val_accuracy", tmp_path)
    policy = options.checkpoint
    accuracies = {1: 0.5, 2: 0.9, 3: 0.7, 4: 0.8, 5: 0.6}
    infos = [checkpoints.CheckpointInfo(path=f"{run_dir}/ckpt-{epoch}", name=f"ckpt-{epoch}",
                                        epoch=epoch, step=epoch,
                                        metrics={"val_accuracy": value, "loss": 1.0})
             for epoch, value in accuracies.items()]
    doomed = checkpoints.select_to_delete(infos, keep_best=policy.keep_best,
                                          monitor=policy.monitor, mode=policy.mode)
    assert sorted(info.epoch for info in doomed) == [1, 3]   # best 2 and 4; 5 is the newest
    # An explicit mode still wins.
    options, _ = build("--keep-best 2 --monitor val_accuracy --monitor-mode min", tmp_path)
    doomed = checkpoints.select_to_delete(infos, keep_best=2, monitor="val_accuracy",
                                          mode=options.checkpoint.mode)
    assert sorted(info.epoch for info in doomed) == [2, 3, 4]   # lowest: 1 and 5


def test_the_loss_fallback_is_always_smaller_is_better():
    infos = [checkpoints.CheckpointInfo(path=f"/r/ckpt-{e}", name=f"ckpt-{e}", epoch=e, step=e,
                                        metrics={"loss": loss})
             for e, loss in ((1, 0.1), (2, 0.9), (3, 0.5))]
    doomed = checkpoints.select_to_delete(infos, keep_best=1, monitor="val_accuracy")
    assert [info.epoch for info in doomed] == [2]


def test_resume_from_a_run_name_finds_it_under_the_checkpoint_root(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path.parent)   # the kernel's directory need not be the notebook's
    run = tmp_path / "tfdist_checkpoints" / "run-a"
    make_checkpoint(str(run), 1)
    latest = make_checkpoint(str(run), 2)
    options, run_dir = build("--resume-from run-a", tmp_path)
    assert options.resume_from == latest and run_dir == str(run)
    assert build("--resume-from run-a/ckpt-000001", tmp_path)[0].resume_from == str(
        run / "ckpt-000001")


def test_resume_from_an_unknown_name_lists_only_what_exists(tmp_path):
    make_checkpoint(str(tmp_path / "tfdist_checkpoints" / "run-a"), 1)
    with pytest.raises(ValueError) as refused:
        build("--resume-from run-b", tmp_path)
    text = str(refused.value)
    assert text.startswith("run-b does not exist") and "tfdist_checkpoints/: run-a" in text
    assert text.count("run-b") == 1


def test_checkpoints_command_finds_a_run_name_under_the_root(tmp_path, monkeypatch):
    from tfmw_notebook.magics.checkpoint_commands import find_run

    monkeypatch.chdir(tmp_path)
    make_checkpoint(str(tmp_path / "tfdist_checkpoints" / "run-a"), 1)
    assert find_run("run-a", None) == str(tmp_path / "tfdist_checkpoints" / "run-a")
    with pytest.raises(ValueError, match=r"^run-b is not a directory: .*tfdist_checkpoints: "
                                         r"run-a\)$"):
        find_run("run-b", None)
