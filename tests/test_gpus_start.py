"""GPUs by default on `%tfdist start` / TFCluster.start: real engines, real TensorFlow,
fake GPUs (tests/fake_gpus.py: an `nvidia-smi` on the engines' PATH).

Each layout of the issue: 4 GPUs + 2 workers, 3 GPUs + 2 workers (one line saying what
to pass), a user's CUDA_VISIBLE_DEVICES=2,3, no GPUs. The workers' CUDA_VISIBLE_DEVICES,
the start line and the status are checked; TensorFlow finds no real GPU behind the
fake and trains on the CPU, also with the NCCL choice `--communication auto` makes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest
from tfmw_notebook import ClusterSetupError, TFCluster

import fake_gpus
from kernel_session import KernelSession

pytestmark = pytest.mark.timeout(240)

# Each worker's view: its CUDA_VISIBLE_DEVICES, the devices TF made, the all-reduce the
# strategy was built with, and one all-reduce across the workers.
WHAT_EACH_SEES = (
    "import os\n"
    "total = float(strategy.reduce('SUM', strategy.run(lambda: tf.constant(1.0)), axis=None))\n"
    "seen = [os.environ['CUDA_VISIBLE_DEVICES'], sorted({d.device_type for d in "
    "tf.config.list_logical_devices()}), "
    "strategy.extended._communication_options.implementation.name, total]\n")


@pytest.fixture
def fake_smi(tmp_path, monkeypatch):
    """The fake on this process's PATH, which engines started from here inherit."""
    directory = fake_gpus.install(str(tmp_path / "bin"), 4)
    monkeypatch.setenv("PATH", fake_gpus.path_with(directory))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return directory


def seen_by_workers(cluster: TFCluster) -> list[list]:
    cluster.run(WHAT_EACH_SEES, record=False)
    return [cluster.pull(["seen"], rank=rank)["seen"] for rank in range(cluster.size)]


def test_four_gpus_two_workers_get_two_each_and_nccl_also_after_a_restart(fake_smi):
    with TFCluster.start(2, timeout=120) as cluster:
        assert seen_by_workers(cluster) == [["0,1", ["CPU"], "NCCL", 2.0],
                                            ["2,3", ["CPU"], "NCCL", 2.0]]
        assert cluster.describe().endswith("; devices: GPU 0,1 | GPU 2,3 (NCCL all-reduce)")
        assert [row["devices"] for row in cluster.status()] == ["GPU 0,1", "GPU 2,3"]
        assert [w.devices for w in cluster.workers] == ["0,1", "2,3"]
        # Fresh engines after a restart find the GPUs and get the same split.
        cluster.restart()
        assert [s[0] for s in seen_by_workers(cluster)] == ["0,1", "2,3"]


def test_a_users_cuda_visible_devices_is_the_set_the_workers_share(fake_smi, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    with TFCluster.start(2, timeout=120) as cluster:
        assert [s[0] for s in seen_by_workers(cluster)] == ["2", "3"]
        assert [row["devices"] for row in cluster.status()] == ["GPU 2", "GPU 3"]


def test_no_gpus_train_on_the_cpu_as_before(fake_smi):
    fake_gpus.set_count(fake_smi, 0)
    with TFCluster.start(2, timeout=120) as cluster:
        assert seen_by_workers(cluster) == [["-1", ["CPU"], "AUTO", 2.0]] * 2
        assert cluster.describe().endswith("; devices: CPU")
        assert [row["devices"] for row in cluster.status()] == ["CPU", "CPU"]


def test_three_gpus_two_workers_is_one_line_and_no_engine_is_left(fake_smi):
    fake_gpus.set_count(fake_smi, 3)
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    began = time.monotonic()
    with pytest.raises(ClusterSetupError) as caught:
        TFCluster.start(2, timeout=120)
    message = str(caught.value)
    assert "has 3 GPUs for 2 workers, which do not split evenly" in message
    assert "--gpus-per-worker 1 (leaves 1 idle), -n 3 (one GPU each)" in message
    assert "\n" not in message
    assert time.monotonic() - began < 60
    left = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
    _, alive = psutil.wait_procs(left, timeout=15)
    assert not alive, [p.cmdline() for p in alive]


def test_an_explicit_count_is_checked_and_zero_hides_them(fake_smi):
    with pytest.raises(ClusterSetupError, match="2 workers x 3 GPUs need 6 GPUs on host "):
        TFCluster.start(2, timeout=120, gpus_per_worker=3)
    with TFCluster.start(2, timeout=120, gpus_per_worker=0) as cluster:
        assert [s[:3] for s in seen_by_workers(cluster)] == [["-1", ["CPU"], "AUTO"]] * 2


def test_the_start_line_and_status_show_each_workers_gpus(fake_smi, tmp_path):
    session = KernelSession(env={"PATH": os.environ["PATH"]}, cwd=str(tmp_path))
    try:
        session.ok("%load_ext tfmw_notebook", timeout=60)
        out = session.ok("%tfdist start -n 2", timeout=180)
        assert "2 workers ready" in out.stdout
        assert "devices: GPU 0,1 | GPU 2,3 (NCCL all-reduce)" in out.stdout, out.stdout
        lines = session.ok("%tfdist status").stdout.strip().splitlines()
        assert "devices" in lines[0].split()
        assert "GPU 0,1" in lines[1] and "GPU 2,3" in lines[2], lines
        out = session.ok("%%tfdist\nimport os\nos.environ['CUDA_VISIBLE_DEVICES']")
        assert out.results[-1]["text/plain"] == "'0,1'"   # the chief's
    finally:
        try:
            session.execute("%tfdist stop", timeout=60)
        finally:
            session.shutdown()


GUARD = """
import os, sys
import tensorflow as tf
from tfmw_notebook.worker.boot import gpus
gpus.check_still_assignable(None, "0,1")      # devices not set up yet: in time
tf.config.list_physical_devices()             # what any TF op does first
gpus.check_still_assignable(None, "-1")       # no GPU was visible anyway: harmless
try:
    gpus.check_still_assignable(None, "0,1")
except gpus.GpuProblem as exc:
    print(exc)
"""


def test_gpus_cannot_be_given_once_tensorflow_set_up_its_devices():
    """The bootstrap refuses, in one line, an engine whose TensorFlow already listed its
    devices: CUDA would ignore the CUDA_VISIBLE_DEVICES set now."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    done = subprocess.run([sys.executable, "-c", GUARD], capture_output=True, text=True,
                          timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines() == [
        "TensorFlow on this engine already set up its devices (with CUDA_VISIBLE_DEVICES=None), "
        "so GPUs 0,1 cannot be given to it: restart the engines, then attach again (or pass "
        "--gpus-per-worker 0)"]
