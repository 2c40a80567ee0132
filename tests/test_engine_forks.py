"""Engines forked from the cluster's fork server (cluster/launch/fork_server.py,
worker/boot/engine_forkserver.py, protocol/engine_standin.py): the workers are its children and
train; each stand-in is the process ipyparallel's launcher knows and ends as its engine
ends; an engine never outlives its stand-in; a stand-in the server cannot serve starts its
engine itself.

Real 2-worker clusters started in this process; the request's encoding and the server's
environment check are pure and tested alone.
"""

from __future__ import annotations

import os
import signal
import time

import psutil
import pytest
from tfmw_notebook import TFCluster
from tfmw_notebook.protocol.engine_standin import decode_request, encode_request
from tfmw_notebook.worker.boot.engine_forkserver import import_time_difference

SERVER = "tfmw_notebook.worker.boot.engine_forkserver"
STANDIN = "engine_standin.py"


def cmdline(pid: int) -> str:
    return " ".join(psutil.Process(pid).cmdline())


def wait_gone(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def cluster(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    started = TFCluster.start(2, timeout=120)
    try:
        yield started
    finally:
        started.stop()


@pytest.mark.unit
def test_a_request_decodes_only_once_whole():
    data = encode_request(["--ip=1"], {"A": "b"}, "/somewhere", 42)
    assert decode_request(data[:3]) is None
    assert decode_request(data[:-1]) is None
    assert decode_request(data) == {"argv": ["--ip=1"], "env": {"A": "b"},
                                    "cwd": "/somewhere", "pid": 42}


@pytest.mark.unit
def test_only_variables_read_at_import_must_match():
    ours = {"TF_USE_LEGACY_KERAS": "0", "CUDA_VISIBLE_DEVICES": "-1", "HOME": "/root",
            "IPP_CLUSTER_ID": "a"}
    assert import_time_difference(ours, {**ours, "HOME": "/x", "IPP_CLUSTER_ID": "b"}) == []
    assert import_time_difference(ours, {**ours, "TF_USE_LEGACY_KERAS": "1"}) == \
        ["TF_USE_LEGACY_KERAS"]
    theirs = {k: v for k, v in ours.items() if k != "CUDA_VISIBLE_DEVICES"}
    assert import_time_difference(ours, {**theirs, "PYTHONHASHSEED": "0"}) == \
        ["CUDA_VISIBLE_DEVICES", "PYTHONHASHSEED"]


@pytest.mark.timeout(300)
def test_workers_are_forked_from_one_server_train_and_draw_apart(cluster, tmp_path,
                                                                 monkeypatch):
    # Restarted from elsewhere: the launcher starts engines where the cluster started, and
    # so does the server (its engines get the stand-in's directory, not the server's).
    (tmp_path / "later").mkdir()
    monkeypatch.chdir(tmp_path / "later")
    cluster.restart()
    parents = {psutil.Process(w.pid).ppid() for w in cluster.workers}
    assert len(parents) == 1 and SERVER in cmdline(parents.pop())
    for worker in cluster.workers:
        assert worker.launched_as and worker.launched_as != worker.pid
        assert STANDIN in cmdline(worker.launched_as)
    cluster.run("import os, numpy as np\n"
                "draw, cwd = float(np.random.rand()), os.getcwd()\n"
                "with strategy.scope():\n"
                "    model = tf.keras.Sequential([tf.keras.Input((4,)),\n"
                "                                 tf.keras.layers.Dense(1)])\n"
                "    model.compile('sgd', 'mse')\n"
                "history = model.fit(tf.ones((32, 4)), tf.ones((32, 1)), epochs=2, verbose=0)\n"
                "loss = history.history['loss'][-1]\n")
    seen = [cluster.pull(["draw", "cwd", "loss"], rank=rank) for rank in (0, 1)]
    # NumPy's global state is reseeded in each fork, as each fresh process seeded its own.
    assert seen[0]["draw"] != seen[1]["draw"]
    # The stand-in's working directory (ipyparallel's launcher starts it where the cluster started).
    assert {s["cwd"] for s in seen} == {str(tmp_path)}
    assert seen[0]["loss"] == seen[1]["loss"]


@pytest.mark.timeout(300)
def test_an_engine_ends_with_its_standin_and_the_standin_as_its_engine(cluster):
    first, second = cluster.workers
    os.kill(first.launched_as, signal.SIGKILL)
    assert wait_gone(first.pid, 10), "the engine outlived its stand-in"
    os.kill(second.pid, signal.SIGKILL)
    assert wait_gone(second.launched_as, 10), "the stand-in outlived its engine"
    with pytest.raises(Exception, match="killed by SIGKILL"):
        cluster.run("x = 1")


@pytest.mark.timeout(300)
def test_a_standin_the_server_refuses_starts_its_engine_itself(cluster, monkeypatch):
    # Read at import: the server, started without it, cannot make engines that have it.
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "0")
    cluster.restart()
    for worker in cluster.workers:
        assert worker.launched_as is None
        assert "tfmw_notebook.worker.boot.engine_main" in cmdline(worker.pid)
    cluster.run("import os\nflag = os.environ['TF_ENABLE_ONEDNN_OPTS']")
    assert cluster.pull(["flag"], rank=1) == {"flag": "0"}


@pytest.mark.timeout(300)
def test_the_fork_server_can_be_turned_off(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TFMW_NO_FORK_SERVER", "1")
    cluster = TFCluster.start(2, timeout=120)
    try:
        assert cluster._group.forks is None
        for worker in cluster.workers:
            assert worker.launched_as is None
            assert "tfmw_notebook.worker.boot.engine_main" in cmdline(worker.pid)
        cluster.run("x = 1")
    finally:
        cluster.stop()
