"""Check tfmw_notebook on a machine with GPUs: placement, NCCL all-reduce, scaling.

    python benchmarks/gpu_check.py [--workers N] [--batch-per-worker B] [--steps S]
                                   [--epochs E] [--timeout SECONDS]

1. Finds this machine's GPUs as the workers do (NVML, else `nvidia-smi -L`). None: it
   says so and exits 0 (nothing to check; tfmw_notebook trains on the CPU there).
2. Starts N workers (default: one per GPU) with one GPU each and checks placement:
   each worker sees exactly its GPU, runs its op there, shares it with no other
   worker, and (where `nvidia-smi` lists compute processes) its process runs on its
   own GPU only.
3. Checks that the strategy uses NCCL (`--communication auto` picks it when every
   worker has a GPU) and that an all-reduce over the workers' GPUs is exact.
4. Runs one training job (a small CNN on generated 64x64 images, B images per worker
   per step) on 1 worker with 1 GPU and on the N workers, and prints samples/s side by
   side with the scaling efficiency (N workers' samples/s / (N x one worker's)).

Exit status: 0 when every check passed (or no GPU was found), 1 when one failed.
The judgements are pure functions (tfmw_bench/gpu_verdicts.py, unit-tested). It was
written on machines without GPUs: there it has run only its no-GPU path, and its GPU
path against fake GPUs (which it rightly reports as ops on the CPU).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from tfmw_bench.common import progress  # noqa: E402
from tfmw_bench.gpu_verdicts import (  # noqa: E402
    Placement,
    allreduce_problem,
    compute_apps,
    placement_problems,
    samples_per_second,
    scaling_table,
)

VECTOR = 1 << 20   # elements each worker all-reduces (4 MiB of float32)

PLACEMENT_CELL = """\
import os, shutil, socket, subprocess
_gc_out = strategy.run(lambda: tf.reduce_sum(tf.matmul(tf.ones([512, 512]), tf.ones([512, 512]))))
_gc_smi = shutil.which("nvidia-smi")
gpu_check_placement = {
    "host": socket.gethostname(), "pid": os.getpid(),
    "visible": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
    "tf_gpus": len(tf.config.list_logical_devices("GPU")),
    "op_device": strategy.experimental_local_results(_gc_out)[0].device,
    "apps": subprocess.run([_gc_smi, "--query-compute-apps=pid,gpu_uuid", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=30).stdout if _gc_smi else None,
}
_gc_vector = strategy.run(lambda: tf.fill([VECTOR], float(tfdist.rank + 1)))
gpu_check_sum = float(tf.reduce_sum(strategy.reduce("SUM", _gc_vector, axis=None)))
gpu_check_communication = strategy.extended._communication_options.implementation.name
""".replace("VECTOR", str(VECTOR))

JOB_CELL = """\
import time
import numpy as np

class _EpochClock(tf.keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.began = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        gpu_check_epochs.append(time.perf_counter() - self.began)

gpu_check_epochs = []
_rng = np.random.default_rng(0)
_x = _rng.uniform(0, 1, (%(batch)d * 4, 64, 64, 3)).astype("float32")
_y = _rng.integers(0, 10, %(batch)d * 4).astype("int64")
_options = tf.data.Options()
_options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
_data = (tf.data.Dataset.from_tensor_slices((_x, _y)).repeat().batch(%(batch)d)
         .prefetch(tf.data.AUTOTUNE).with_options(_options))
model = tf.keras.Sequential([
    tf.keras.Input(shape=(64, 64, 3)),
    tf.keras.layers.Conv2D(64, 3, padding="same", activation="relu"),
    tf.keras.layers.Conv2D(128, 3, padding="same", activation="relu"),
    tf.keras.layers.MaxPooling2D(),
    tf.keras.layers.Conv2D(256, 3, padding="same", activation="relu"),
    tf.keras.layers.GlobalAveragePooling2D(),
    tf.keras.layers.Dense(10),
])
model.compile(optimizer="sgd", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(_data, epochs=%(epochs)d, steps_per_epoch=%(steps)d, verbose=0,
          callbacks=[_EpochClock()])
"""


NO_GPU = ("gpu_check: no GPU found on this machine (neither NVML nor `nvidia-smi -L` lists "
          "one): nothing to check; tfmw_notebook trains on the CPU here")


def count_gpus() -> int:
    """This machine's GPUs, found as the workers find them (GpuProblem if that hangs)."""
    from tfmw_notebook.worker.boot.gpus import host_gpus

    return len(host_gpus())


def placements(cluster) -> tuple[list[Placement], list[float], list[str]]:
    """Run the placement cell; each worker's placement, all-reduce sum, communication."""
    cluster.run(PLACEMENT_CELL, record=False)
    found, sums, used = [], [], []
    for rank, worker in enumerate(cluster.workers):
        pulled = cluster.pull(["gpu_check_placement", "gpu_check_sum",
                               "gpu_check_communication"], rank=rank)
        seen = pulled["gpu_check_placement"]
        uuids = dict(worker.gpus)
        apps = compute_apps(seen["apps"]) if seen["apps"] is not None else None
        found.append(Placement(
            rank=rank, host=seen["host"], visible=seen["visible"], tf_gpus=seen["tf_gpus"],
            op_device=seen["op_device"],
            expected_uuids=tuple(uuids[v] for v in seen["visible"].split(",") if v in uuids),
            used_uuids=apps.get(seen["pid"]) if apps else None))
        sums.append(pulled["gpu_check_sum"])
        used.append(pulled["gpu_check_communication"])
    return found, sums, used


def check_cluster(cluster) -> list[str]:
    """Placement and all-reduce problems of a running cluster (printed as found)."""
    found, sums, used = placements(cluster)
    problems = placement_problems(found)
    for p in found:
        progress(f"worker {p.rank} on {p.host}: CUDA_VISIBLE_DEVICES={p.visible}, TensorFlow "
                 f"lists {p.tf_gpus} GPU(s), op ran on {p.op_device}")
    if set(used) != {"NCCL"}:
        problems.append(f"the workers' all-reduce is {sorted(set(used))}, not NCCL")
    wrong = allreduce_problem(sums, cluster.size, VECTOR)
    if wrong:
        problems.append(wrong)
    return problems


def throughput(cluster, batch_per_worker: int, steps: int, epochs: int) -> tuple[int, float]:
    """(global batch, samples/s) of the job on `cluster`."""
    from tfmw_notebook.protocol.run_options import CellOptions

    batch = batch_per_worker * cluster.size
    # No dashboard, reporting or checkpoints: the job alone is timed.
    cluster.run(JOB_CELL % {"batch": batch, "steps": steps, "epochs": epochs}, record=False,
                options=CellOptions(), timeout=3600)
    epochs_seconds = cluster.pull(["gpu_check_epochs"])["gpu_check_epochs"]
    return batch, samples_per_second(epochs_seconds, steps, batch)


def run(args, workers: int) -> int:
    from tfmw_notebook import ClusterSetupError, TFCluster

    progress(f"starting {workers} workers with one GPU each")
    try:
        cluster = TFCluster.start(workers, gpus_per_worker=1, timeout=args.timeout)
    except ClusterSetupError as exc:
        print(f"gpu_check: FAILED: {exc}")
        return 1
    with cluster:
        progress(cluster.describe())
        problems = check_cluster(cluster)
        for problem in problems:
            print(f"gpu_check: FAILED: {problem}")
        if problems:
            print("gpu_check: throughput not measured (fix the placement first)")
            return 1
        progress("placement ok; NCCL all-reduce exact; timing the job on every worker")
        many = throughput(cluster, args.batch_per_worker, args.steps, args.epochs)
    progress("timing the job on one worker with one GPU")
    with TFCluster.start(1, gpus_per_worker=1, timeout=args.timeout) as single:
        one = throughput(single, args.batch_per_worker, args.steps, args.epochs)
    print(scaling_table([(1, *one), (workers, *many)]))
    print("gpu_check: ok")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=None,
                        help="workers, one GPU each (default: one per GPU found)")
    parser.add_argument("--batch-per-worker", type=int, default=128)
    parser.add_argument("--steps", type=int, default=50, help="steps per epoch")
    parser.add_argument("--epochs", type=int, default=4, help="the first one is not timed")
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="seconds for the workers to start")
    args = parser.parse_args(argv)
    if min(args.batch_per_worker, args.steps, args.epochs - 1) < 1 or (args.workers or 1) < 1:
        parser.error("--workers, --batch-per-worker and --steps must be >= 1, --epochs >= 2")
    from tfmw_notebook.worker.boot.gpus import GpuProblem

    try:
        gpus = count_gpus()
    except GpuProblem as exc:
        print(f"gpu_check: FAILED: {exc}")
        return 1
    if not gpus:
        print(NO_GPU)
        return 0
    workdir = tempfile.mkdtemp(prefix="tfmw-gpu-check-")
    os.environ.setdefault("IPYTHONDIR", os.path.join(workdir, "ipython"))
    try:
        return run(args, args.workers or gpus)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
