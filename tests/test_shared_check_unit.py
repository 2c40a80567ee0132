"""The check that every worker sees the chief's run directory (worker/writes/checkpointing.py),
with its all-reduces faked: skipped when the workers share one host."""

from __future__ import annotations

import json

import pytest
from tfmw_notebook.worker.liveness import collectives
from tfmw_notebook.worker.writes import checkpointing

pytestmark = pytest.mark.unit


def tf_config(*addresses: str) -> str:
    return json.dumps({"cluster": {"worker": list(addresses)},
                       "task": {"type": "worker", "index": 1}})


@pytest.fixture
def reduces(monkeypatch):
    """The all-reduces the check makes, each answered by the next of `answers`."""
    made, answers = [], []

    def sum_across(value):
        made.append(value)
        return answers.pop(0)

    monkeypatch.setattr(collectives, "sum_across", sum_across)
    monkeypatch.setattr(checkpointing, "_shared_dirs", set())
    return made, answers


def test_workers_on_one_host_share_its_disk_and_make_no_all_reduce(monkeypatch, reduces,
                                                                   tmp_path):
    made, _ = reduces
    monkeypatch.setenv("TF_CONFIG", tf_config("10.0.0.5:4001", "10.0.0.5:4002"))
    checkpointing.check_shared(str(tmp_path / "elsewhere"), rank=1, world_size=2)
    assert made == []


def test_workers_on_two_hosts_are_checked_and_one_that_does_not_see_the_directory_is_named(
        monkeypatch, reduces, tmp_path):
    made, answers = reduces
    monkeypatch.setenv("TF_CONFIG", tf_config("10.0.0.5:4001", "10.0.0.6:4001"))
    answers += [12345.0, 2.0]    # the chief's marker token; rank 1's bit: it does not see it
    with pytest.raises(checkpointing.RunDirNotShared, match="workers 1 do not see"):
        checkpointing.check_shared(str(tmp_path), rank=1, world_size=2)
    assert made == [0.0, 2.0]
    answers += [777.0, 0.0]      # seen by every worker: checked once per directory
    (tmp_path / ".tfmw-shared-check-777").touch()
    checkpointing.check_shared(str(tmp_path), rank=1, world_size=2)
    checkpointing.check_shared(str(tmp_path), rank=1, world_size=2)
    assert made == [0.0, 2.0, 0.0, 0.0]
