"""benchmarks/gpu_check.py: its judgements (pure, tfmw_bench/gpu_verdicts.py), its
no-GPU line on this machine, its verdict on fake GPUs (TensorFlow runs on the CPU
behind them: a placement failure, said per worker), and its timed job on a real
one-worker cluster.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import fake_gpus

BENCHMARKS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          "benchmarks")
sys.path.insert(0, BENCHMARKS)

from tfmw_bench.gpu_verdicts import (  # noqa: E402
    Placement,
    allreduce_problem,
    compute_apps,
    placement_problems,
    samples_per_second,
    scaling_efficiency,
    scaling_table,
)

pytestmark = pytest.mark.timeout(240)
SCRIPT = os.path.join(BENCHMARKS, "gpu_check.py")
GPU = "/job:worker/replica:0/task:{}/device:GPU:0"


def placed(rank, visible, host="h", tf_gpus=1, device=None, expected=(), used=None):
    return Placement(rank, host, visible, tf_gpus, device or GPU.format(rank),
                     tuple(expected), None if used is None else tuple(used))


@pytest.mark.unit
def test_workers_each_on_their_own_gpu_pass():
    assert placement_problems([placed(0, "0", expected=["GPU-a"], used=["GPU-a"]),
                               placed(1, "1", expected=["GPU-b"], used=["GPU-b"]),
                               placed(2, "0", host="other")]) == []


@pytest.mark.unit
def test_each_placement_fault_is_named_with_its_worker():
    problems = placement_problems([
        placed(0, "0", tf_gpus=0, device="/job:worker/replica:0/task:0/device:CPU:0"),
        placed(1, "0,1", tf_gpus=2),
        placed(2, "-1", tf_gpus=0),
        placed(3, "2", expected=["GPU-c"], used=["GPU-c", "GPU-d"]),
    ])
    assert problems == [
        "worker 0 on h sees 0 GPUs, was given 1 (CUDA_VISIBLE_DEVICES=0); none seen means no "
        "driver there or a TensorFlow without CUDA (pip install 'tensorflow[and-cuda]')",
        "worker 0 on h ran its op on /job:worker/replica:0/task:0/device:CPU:0, not a GPU",
        "workers 0 and 1 on h share GPU 0",
        "worker 2 on h was given no GPU (CUDA_VISIBLE_DEVICES=-1)",
        "worker 3 on h runs on GPU-d per nvidia-smi, not only on its own GPU-c",
    ]


@pytest.mark.unit
def test_nvidia_smis_compute_processes_are_read_per_pid():
    text = "123, GPU-a\n123, GPU-a\n456, GPU-b\nNo running processes found\n7, [N/A]\n"
    assert compute_apps(text) == {123: ("GPU-a",), 456: ("GPU-b",)}


@pytest.mark.unit
def test_the_all_reduce_must_be_exact_on_every_worker():
    assert allreduce_problem([30.0, 30.0, 30.0, 30.0], 4, 3) is None   # (1+2+3+4) x 3
    assert "wrong on [1]" in allreduce_problem([30.0, 29.0, 30.0, 30.0], 4, 3)
    assert "missing workers" in allreduce_problem([30.0], 4, 3)


@pytest.mark.unit
def test_samples_per_second_leave_out_the_first_epoch_and_efficiency_compares_n_with_one():
    assert samples_per_second([9.0, 1.0, 2.0, 1.0], steps=10, global_batch=100) == 1000.0
    assert scaling_efficiency(1000.0, 3600.0, 4) == 0.9
    with pytest.raises(ValueError):
        samples_per_second([1.0, 0.0], 1, 1)
    table = scaling_table([(1, 128, 1000.0), (4, 512, 3600.0)]).splitlines()
    assert table[0].split() == ["workers", "global", "batch", "samples/s", "efficiency"]
    assert table[1].split() == ["1", "128", "1,000", "-"]
    assert table[2].split() == ["4", "512", "3,600", "90%"]


def run_script(*args, path=None):
    env = {**os.environ, "PATH": path or os.environ["PATH"]}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True,
                          timeout=200, env=env)


def test_on_this_machine_it_says_no_gpu_was_found(tmp_path):
    done = run_script(path=fake_gpus.install(str(tmp_path), 0) + os.pathsep + "/usr/bin:/bin")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "gpu_check: no GPU found on this machine (neither NVML nor `nvidia-smi -L` lists one): "
        "nothing to check; tfmw_notebook trains on the CPU here")


def test_fake_gpus_fail_the_placement_per_worker_and_skip_the_timing(tmp_path):
    done = run_script("--workers", "2", path=fake_gpus.path_with(
        fake_gpus.install(str(tmp_path), 2)))
    assert done.returncode == 1, done.stdout + done.stderr
    failed = [line for line in done.stdout.splitlines() if "FAILED" in line]
    assert len(failed) == 4, done.stdout   # 2 workers x (no GPU seen, op on the CPU)
    assert "worker 1 on " in failed[2] and "sees 0 GPUs, was given 1" in failed[2]
    assert "devices: GPU 0 | GPU 1 (NCCL all-reduce)" in done.stdout
    assert "all-reduce" not in "".join(failed)   # NCCL's all-reduce ran exact on the CPU
    assert done.stdout.rstrip().endswith("throughput not measured (fix the placement first)")


def test_the_timed_job_runs_and_gives_samples_per_second():
    from tfmw_notebook import TFCluster

    import gpu_check

    with TFCluster.start(1, timeout=120, gpus_per_worker=0) as cluster:
        batch, rate = gpu_check.throughput(cluster, batch_per_worker=4, steps=2, epochs=2)
        assert batch == 4
        assert 0 < rate < 1e6
