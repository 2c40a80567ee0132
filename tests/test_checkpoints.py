"""The checkpoint catalog on real directories: listing, atomic commit, resolve, retention."""

import json
import os

import pytest
from tfmw_notebook.protocol import checkpoints as ck
from tfmw_notebook.protocol.checkpoints import CheckpointInfo

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]


def save(run_dir, epoch, metrics=None, nonce="w0", weights=b"weights", **extra):
    """What the worker-side saver does: fill a temp dir, meta.json last, then commit."""
    temp = ck.prepare_temp(run_dir, epoch, nonce)
    with open(os.path.join(temp, "weights.index"), "wb") as file:
        file.write(weights)
    meta = {"epoch": epoch, "step": 70 * epoch, "metrics": metrics or {"loss": 1.0 / epoch},
            "wall_time": 2.5 * epoch, "saved_at": 1_700_000_000.0 + epoch, "tf_version": "2.21.0",
            "run": os.path.basename(run_dir), "model": "model"} | extra
    ck.write_meta(temp, meta)
    return ck.commit(temp, run_dir, epoch)


def info(epoch, **metrics):
    return CheckpointInfo(path=f"/runs/a/{ck.checkpoint_name(epoch)}",
                          name=ck.checkpoint_name(epoch), epoch=epoch, metrics=metrics)


def epochs(infos):
    return [i.epoch for i in infos]


@pytest.fixture
def run_dir(tmp_path):
    path = tmp_path / "root" / "run-a"
    ck.ensure_run(path, workers=2, tf_version="2.21.0")
    return str(path)


# -- names and run.json ----------------------------------------------------------------


def test_checkpoint_name_is_zero_padded_and_checked():
    assert ck.checkpoint_name(3) == "ckpt-000003"
    assert ck.checkpoint_name(1234567) == "ckpt-1234567"
    with pytest.raises(ValueError, match=r"Received: epoch=-1\. Expected an integer >= 0\."):
        ck.checkpoint_name(-1)


def test_ensure_run_writes_run_json_once(run_dir):
    path = os.path.join(run_dir, "run.json")
    first = json.load(open(path))
    assert first["run"] == "run-a" and first["workers"] == 2 and first["tf_version"] == "2.21.0"
    ck.ensure_run(run_dir, workers=4, tf_version="9.9")
    assert json.load(open(path)) == first
    assert not [n for n in os.listdir(run_dir) if n.startswith(ck.TEMP_PREFIX)]


# -- listing -----------------------------------------------------------------------


def test_listing_reads_meta_and_sorts_by_epoch(run_dir):
    for epoch in (3, 1, 2):
        save(run_dir, epoch, metrics={"loss": 1.0 / epoch, "val_loss": 2.0 / epoch},
             nonce=f"n{epoch}")
    listed = ck.list_checkpoints(run_dir)
    assert epochs(listed) == [1, 2, 3]
    third = listed[-1]
    assert third.name == "ckpt-000003" and third.path == os.path.join(run_dir, "ckpt-000003")
    assert third.step == 210 and third.metrics == {"loss": pytest.approx(1 / 3),
                                                   "val_loss": pytest.approx(2 / 3)}
    assert ((third.wall_time, third.tf_version, third.run, third.model)
            == (7.5, "2.21.0", "run-a", "model"))
    assert ck.read_checkpoint(third.path) == third
    assert hash(third) == hash(ck.read_checkpoint(third.path))    # frozen: usable in sets


def test_listing_ignores_temp_and_broken_directories(run_dir):
    save(run_dir, 1)
    temp = ck.prepare_temp(run_dir, 2, "dead")             # a writer still at work (or dead)
    ck.write_meta(temp, {"epoch": 2, "metrics": {}})        # even with its meta written
    broken = {
        "ckpt-000003": "{not json",
        "ckpt-000004": json.dumps({"step": 5}),             # no epoch
        "ckpt-000005": json.dumps({"epoch": "5"}),          # epoch not an int
        "ckpt-000006": json.dumps([6]),                     # not an object
        "checkpoint-7": json.dumps({"epoch": 7}),           # wrong name
    }
    for name, text in broken.items():
        os.makedirs(os.path.join(run_dir, name))
        with open(os.path.join(run_dir, name, "meta.json"), "w") as file:
            file.write(text)
    os.makedirs(os.path.join(run_dir, "ckpt-000008"))       # no meta.json at all
    assert [i.name for i in ck.list_checkpoints(run_dir)] == ["ckpt-000001"]
    assert ck.list_checkpoints(os.path.join(run_dir, "missing")) == []


def test_list_runs_newest_first(tmp_path):
    root = tmp_path / "root"
    for name, created in (("old", 100.0), ("new", 300.0), ("middle", 200.0)):
        ck.ensure_run(root / name, workers=1, tf_version="2.21.0")
        data = json.loads((root / name / "run.json").read_text()) | {"created": created}
        (root / name / "run.json").write_text(json.dumps(data))
    (root / "no-run-json").mkdir()
    save(str(root / "no-run-json"), 1)                       # counts: it has a ckpt-*
    os.utime(root / "no-run-json", (250.0, 250.0))
    (root / "unrelated").mkdir()
    (root / ".tmp-whatever").mkdir()
    runs = ck.list_runs(root)
    assert [os.path.basename(r) for r in runs] == ["new", "no-run-json", "middle", "old"]
    assert ck.list_runs(tmp_path / "nowhere") == []


# -- atomic commit -----------------------------------------------------------------


def test_a_writer_that_dies_before_commit_leaves_the_previous_checkpoint_latest(run_dir):
    save(run_dir, 1)
    save(run_dir, 2, nonce="second")
    # Epoch 3's writer dies half-way: TF files written, meta.json maybe not, never committed.
    temp = ck.prepare_temp(run_dir, 3, "crashed")
    with open(os.path.join(temp, "weights.data-00000-of-00001"), "wb") as file:
        file.write(b"half")
    assert epochs(ck.list_checkpoints(run_dir)) == [1, 2]
    latest = ck.resolve("latest", root=os.path.dirname(run_dir))
    assert latest.name == "ckpt-000002"
    assert ck.resolve(run_dir).name == "ckpt-000002"

    assert ck.clean_temp(run_dir) == 1
    assert sorted(os.listdir(run_dir)) == ["ckpt-000001", "ckpt-000002", "run.json"]
    assert ck.clean_temp(run_dir) == 0


def test_commit_moves_the_temp_dir_into_place(run_dir):
    temp = ck.prepare_temp(run_dir, 4, "abc")
    assert os.path.basename(temp) == ".tmp-ckpt-000004-abc"
    with pytest.raises(FileExistsError):
        ck.prepare_temp(run_dir, 4, "abc")                  # never share a writer's directory
    with pytest.raises(ValueError, match="no meta.json"):
        ck.commit(temp, run_dir, 4)                          # meta.json is written last
    ck.write_meta(temp, {"epoch": 4, "metrics": {"loss": 0.5}})
    assert os.listdir(temp) == ["meta.json"]                 # no meta.json.tmp left behind
    with pytest.raises(ValueError, match="says epoch 4"):
        ck.commit(temp, run_dir, 5)
    final = ck.commit(temp, run_dir, 4)
    assert final == os.path.join(run_dir, "ckpt-000004")
    assert not os.path.exists(temp)
    assert epochs(ck.list_checkpoints(run_dir)) == [4]


def test_write_meta_refuses_meta_without_an_integer_epoch(run_dir):
    temp = ck.prepare_temp(run_dir, 1, "x")
    with pytest.raises(ValueError, match='no integer "epoch"'):
        ck.write_meta(temp, {"epoch": 1.0})
    assert not os.path.exists(os.path.join(temp, "meta.json"))


def test_committing_an_epoch_again_replaces_it(run_dir):
    save(run_dir, 1)
    save(run_dir, 2, metrics={"loss": 0.9}, weights=b"first try")
    # Training restarted from epoch 1 and reached epoch 2 again.
    final = save(run_dir, 2, metrics={"loss": 0.4}, weights=b"second try", nonce="retry")
    listed = ck.list_checkpoints(run_dir)
    assert epochs(listed) == [1, 2] and listed[-1].metrics == {"loss": 0.4}
    with open(os.path.join(final, "weights.index"), "rb") as file:
        assert file.read() == b"second try"                  # no mix of old and new files
    assert sorted(os.listdir(run_dir)) == ["ckpt-000001", "ckpt-000002", "run.json"]


def test_a_failed_replacement_puts_the_old_checkpoint_back(run_dir, monkeypatch):
    save(run_dir, 1, metrics={"loss": 0.9})
    temp = ck.prepare_temp(run_dir, 1, "retry")
    ck.write_meta(temp, {"epoch": 1, "metrics": {"loss": 0.1}})
    real_rename = os.rename

    def rename(source, target):
        if source == temp:
            raise OSError("disk full")
        return real_rename(source, target)

    monkeypatch.setattr(ck.os, "rename", rename)
    with pytest.raises(OSError, match="disk full"):
        ck.commit(temp, run_dir, 1)
    monkeypatch.undo()
    assert [i.metrics for i in ck.list_checkpoints(run_dir)] == [{"loss": 0.9}]


def test_delete_checkpoint_refuses_anything_but_a_complete_checkpoint(run_dir):
    first = ck.resolve(save(run_dir, 1))
    save(run_dir, 2)
    temp = ck.prepare_temp(run_dir, 3, "x")
    with pytest.raises(ValueError, match="refusing to delete .*not a complete checkpoint"):
        ck.delete_checkpoint(temp)
    with pytest.raises(ValueError, match="refusing to delete"):
        ck.delete_checkpoint(run_dir)
    assert os.path.isdir(temp) and os.path.isdir(run_dir)
    ck.delete_checkpoint(first)
    assert epochs(ck.list_checkpoints(run_dir)) == [2]
    assert not os.path.exists(first.path)
    assert sorted(os.listdir(run_dir)) == [os.path.basename(temp), "ckpt-000002", "run.json"]


# -- resolve -----------------------------------------------------------------------


def test_resolve_latest_takes_the_newest_run_that_has_a_checkpoint(tmp_path):
    root = tmp_path / "root"
    save(str(root / "older"), 5)
    ck.ensure_run(root / "older", 2, "2.21.0")
    ck.ensure_run(root / "newest-but-empty", 2, "2.21.0")
    older_run = json.loads((root / "older" / "run.json").read_text())
    (root / "newest-but-empty" / "run.json").write_text(
        json.dumps(older_run | {"run": "newest-but-empty", "created": older_run["created"] + 60}))
    latest = ck.resolve("latest", root=root)
    assert latest.path == str(root / "older" / "ckpt-000005")


def test_resolve_a_run_or_a_checkpoint_directory(run_dir):
    root = os.path.dirname(run_dir)
    for epoch in (1, 2, 3):
        save(run_dir, epoch, nonce=f"n{epoch}")
    assert ck.resolve(run_dir).epoch == 3
    assert ck.resolve("run-a", root=root).epoch == 3                      # relative to root
    assert ck.resolve(os.path.join(run_dir, "ckpt-000002")).epoch == 2
    assert ck.resolve("run-a/ckpt-000001", root=root).epoch == 1


def test_resolve_latest_with_nothing_says_how_to_make_a_checkpoint(tmp_path):
    with pytest.raises(ValueError) as caught:
        ck.resolve("latest", root=tmp_path / "empty")
    message = str(caught.value)
    assert message == (f"no checkpoint found under {tmp_path / 'empty'}/: "
                       "train with %%tfdist --checkpoint-dir ... first")
    assert "\n" not in message


def test_resolve_a_directory_without_meta_names_the_checkpoints_to_pick(run_dir):
    save(run_dir, 1)
    save(run_dir, 2)
    bad = os.path.join(run_dir, "ckpt-000003")
    os.makedirs(bad)
    with pytest.raises(ValueError) as caught:
        ck.resolve(bad)
    assert str(caught.value) == (f"{bad} is not a checkpoint directory (no meta.json): "
                                 "pick one of ckpt-000001, ckpt-000002")


def test_resolve_error_messages(run_dir, tmp_path):
    root = os.path.dirname(run_dir)
    with pytest.raises(ValueError,
                       match=r"^run .*run-a has no complete checkpoint yet: train with"):
        ck.resolve(run_dir)

    temp = ck.prepare_temp(run_dir, 1, "dead")
    with pytest.raises(ValueError,
                       match=r"^run .* has no complete checkpoint yet \(only unfinished ones\)"):
        ck.resolve(run_dir)
    save(run_dir, 2)
    with pytest.raises(ValueError,
                       match=r"is an unfinished checkpoint .*: pick one of ckpt-000002$"):
        ck.resolve(temp)

    with pytest.raises(ValueError,
                       match=r"^nope does not exist: give 'latest', .*runs under .*: run-a\)$"):
        ck.resolve("nope", root=root)
    with pytest.raises(ValueError, match=r"holds runs, not checkpoints: pick one of run-a"):
        ck.resolve(root)
    with pytest.raises(ValueError, match=r"is a file, not a checkpoint directory"):
        ck.resolve(os.path.join(run_dir, "run.json"))
    (tmp_path / "plain").mkdir()
    with pytest.raises(ValueError, match=r"is neither a run nor a checkpoint directory"):
        ck.resolve(str(tmp_path / "plain"))
    with pytest.raises(ValueError, match=r"^no checkpoint given"):
        ck.resolve("  ")


# -- retention ---------------------------------------------------------------------


def test_both_limits_none_deletes_nothing():
    infos = [info(e, val_loss=1.0 / e) for e in range(1, 6)]
    assert ck.select_to_delete(infos) == []


def test_keep_last():
    infos = [info(e, loss=1.0) for e in (3, 1, 5, 2, 4)]
    assert epochs(ck.select_to_delete(infos, keep_last=2)) == [1, 2, 3]
    assert epochs(ck.select_to_delete(infos, keep_last=1)) == [1, 2, 3, 4]
    assert ck.select_to_delete(infos, keep_last=10) == []


def test_keep_best_keeps_the_newest_too():
    values = {1: 0.5, 2: 0.2, 3: 0.4, 4: 0.3, 5: 0.9}
    infos = [info(e, loss=0.1, val_loss=v) for e, v in values.items()]
    assert epochs(ck.select_to_delete(infos, keep_best=2)) == [1, 3]  # best 2, 4; newest 5
    assert epochs(ck.select_to_delete(infos, keep_best=2, mode="max")) == [2, 3, 4]  # best 5, 1
    assert epochs(ck.select_to_delete(infos, keep_best=1,
                                      monitor="loss")) == [1, 2, 3, 4]  # ties: newest


def test_keep_last_and_keep_best_keep_the_union():
    values = {1: 0.1, 2: 0.5, 3: 0.6, 4: 0.7, 5: 0.8}
    infos = [info(e, val_loss=v) for e, v in values.items()]
    assert epochs(ck.select_to_delete(infos, keep_last=2, keep_best=1)) == [2, 3]


def test_keep_best_without_the_monitored_metric():
    # Checkpoints lacking val_loss do not count as best.
    infos = [info(1, loss=0.1), info(2, loss=0.9, val_loss=0.8), info(3, loss=0.5, val_loss=0.3),
             info(4, loss=0.7)]
    assert epochs(ck.select_to_delete(infos, keep_best=1)) == [1, 2]
    # val_loss nowhere: fall back to loss.
    only_loss = [info(1, loss=0.1), info(2, loss=0.9), info(3, loss=0.5)]
    assert epochs(ck.select_to_delete(only_loss, keep_best=1)) == [2]
    # No loss either: keep by recency.
    bare = [info(e) for e in (1, 2, 3, 4)]
    assert epochs(ck.select_to_delete(bare, keep_best=2)) == [1, 2]
    nan = [info(1, val_loss=float("nan")), info(2, val_loss=0.5), info(3, val_loss=0.9)]
    assert epochs(ck.select_to_delete(nan, keep_best=1)) == [1]


@pytest.mark.parametrize("argument, value, expected", [
    ("keep_last", 0, "Invalid value for argument `keep_last`. Received: keep_last=0. "
                     "Expected an integer >= 1 or None."),
    ("keep_best", -2, "Invalid value for argument `keep_best`. Received: keep_best=-2. "
                      "Expected an integer >= 1 or None."),
    ("keep_last", 1.5, "Invalid value for argument `keep_last`. Received: keep_last=1.5. "
                       "Expected an integer >= 1 or None."),
    ("keep_best", True, "Invalid value for argument `keep_best`. Received: keep_best=True. "
                        "Expected an integer >= 1 or None."),
    ("mode", "avg", "Invalid value for argument `mode`. Received: mode='avg'. "
                    "Expected 'auto', 'min' or 'max'."),
    ("monitor", "", "Invalid value for argument `monitor`. Received: monitor=''. "
                    "Expected a metric name such as 'val_loss'."),
])
def test_retention_arguments_are_checked(argument, value, expected):
    with pytest.raises(ValueError) as caught:
        ck.select_to_delete([info(1, loss=1.0)], **{argument: value})
    assert str(caught.value) == expected


def test_retention_applied_on_disk(run_dir):
    for epoch in range(1, 6):
        save(run_dir, epoch, metrics={"val_loss": [0.5, 0.1, 0.4, 0.3, 0.6][epoch - 1]},
             nonce=f"n{epoch}")
    for doomed in ck.select_to_delete(ck.list_checkpoints(run_dir), keep_last=1, keep_best=2):
        ck.delete_checkpoint(doomed)
    assert epochs(ck.list_checkpoints(run_dir)) == [2, 4, 5]


def test_metric_series():
    infos = [info(3, loss=0.3), info(1, loss=0.5, val_loss=0.6), info(2, val_loss=0.4)]
    assert ck.metric_series(infos, "loss") == ([1, 3], [0.5, 0.3])
    assert ck.metric_series(infos, "val_loss") == ([1, 2], [0.6, 0.4])
    assert ck.metric_series(infos, "accuracy") == ([], [])
