"""Reading a cluster file that `ipcluster start` is rewriting (cluster/launch/cluster_file.py)."""

from __future__ import annotations

import json
import os
import threading

import ipyparallel as ipp
import pytest
from tfmw_notebook.cluster.launch.cluster_file import read_cluster

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]


def _cluster_file(profile_dir) -> tuple[str, str]:
    """A cluster file's path and its whole text, as ipcluster writes it."""
    cluster = ipp.Cluster(profile_dir=str(profile_dir), cluster_id="train", n=2)
    os.makedirs(os.path.dirname(cluster.cluster_file), exist_ok=True)
    return cluster.cluster_file, json.dumps(cluster.to_dict())


def test_a_file_cut_short_is_read_again_once_it_is_whole(tmp_path):
    path, whole = _cluster_file(tmp_path)
    with open(path, "w") as f:
        f.write(whole[:0])   # ipcluster has opened it to write it again
    finish = threading.Timer(0.3, lambda: open(path, "w").write(whole))
    finish.start()
    try:
        cluster = read_cluster(str(tmp_path), "train", seconds=10)
    finally:
        finish.join()
    assert cluster.cluster_id == "train" and cluster.n == 2


def test_a_file_that_stays_broken_raises_after_the_moment_and_none_is_file_not_found(tmp_path):
    path, whole = _cluster_file(tmp_path)
    with open(path, "w") as f:
        f.write(whole[: len(whole) // 2])
    with pytest.raises(ValueError):
        read_cluster(str(tmp_path), "train", seconds=0.2)
    with pytest.raises(FileNotFoundError):
        read_cluster(str(tmp_path), "other", seconds=0.2)
