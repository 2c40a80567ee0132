"""Notebook data to the workers: `--shard` against `--push`, and Ray Data when Ray is
installed (`pip install -e ".[bench]"`), side by side in one run.

    python benchmarks/data.py [--gib 1.0] [--workers 2,4] [--rounds 3] [--no-ray]

For each worker count one cluster is started. Each round sends one float32 array of
--gib GiB three ways, the order reversed every other round: `cluster.shard({"data":
array})` (each worker its rows, mapped from one shared file on this host),
`cluster.push({"data": array})` (the whole array to every worker: a large array takes the
same shared file) and "controller", the same push through ipyparallel's controller (as
every push went before large arrays had a way of their own). Each is followed by a cell
that sums every value on every worker, so all count until the rows are in each worker's
memory. A worker's memory growth (RSS, from /proc) is set against a shard's bytes (1/N
of the array): --shard's workers should hold their rows only, --push's hold all N shards.
Ray: `ray.data.from_numpy(array)` and a TensorflowTrainer whose loop reads its shard
(`train.get_dataset_shard`): the data path (from_numpy, then the slowest worker's read of
its shard) and the whole `fit()` (Ray Train starting its workers too). Prints medians and
ratios, then every value.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import psutil
from tfmw_notebook import TFCluster
from tfmw_notebook.cluster.data import shard_sets

WAYS = ("shard", "push", "controller")

READ_ALL = "total = float(data.sum())"
FORGET = "import gc\ndata = None\ngc.collect()"


def rss(pids: list[int]) -> list[int]:
    return [psutil.Process(pid).memory_info().rss for pid in pids]


def one_way(cluster: TFCluster, way: str, array: np.ndarray) -> tuple[float, float]:
    """(seconds until every worker summed its rows, the largest worker's memory growth /
    a shard's bytes: 1/N of the array)."""
    pids = [row["pid"] for row in cluster.status()]
    cluster.run(FORGET)
    before = rss(pids)
    large = shard_sets.LARGE_PUSH_BYTES
    if way == "controller":   # as --push sent every value before large ones had a way
        shard_sets.LARGE_PUSH_BYTES = 1 << 62
    try:
        began = time.perf_counter()
        if way == "shard":
            cluster.shard({"data": array})
        else:
            cluster.push({"data": array})
        cluster.run(READ_ALL)
        seconds = time.perf_counter() - began
    finally:
        shard_sets.LARGE_PUSH_BYTES = large
    grown = [after - was for after, was in zip(rss(pids), before)]
    memory = max(grown) / (array.nbytes / cluster.size)
    cluster.run(FORGET)
    return seconds, memory


def ray_round(array: np.ndarray, workers: int) -> tuple[float, float]:
    """(seconds of the data path: from_numpy plus the slowest worker's reading of its
    shard, seconds of the whole fit: the worker group's start too). Each worker writes its
    times to a file (Ray Train 2.x's Result holds no metrics reported without a
    checkpoint)."""
    import json
    import os
    import tempfile

    import ray
    from ray import train
    from ray.train import ScalingConfig
    from ray.train.tensorflow import TensorflowTrainer

    def loop(config):
        began_reading = time.time()
        shard = train.get_dataset_shard("train")
        total = 0.0
        for batch in shard.iter_batches(batch_size=1 << 16, batch_format="numpy"):
            total += float(batch["data"].sum())
        rank = train.get_context().get_world_rank()
        with open(os.path.join(config["out"], f"{rank}.json"), "w") as file:
            json.dump({"read": time.time() - began_reading, "total": total}, file)

    out = tempfile.mkdtemp(prefix="tfmw-bench-ray-")
    began = time.time()
    dataset = ray.data.from_numpy(array)
    put = time.time() - began
    trainer = TensorflowTrainer(loop, train_loop_config={"out": out}, datasets={"train": dataset},
                                scaling_config=ScalingConfig(num_workers=workers))
    trainer.fit()
    whole = time.time() - began
    reads = []
    for name in os.listdir(out):
        with open(os.path.join(out, name)) as file:
            reads.append(json.load(file)["read"])
    assert len(reads) == workers, reads
    return put + max(reads), whole


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--workers", default="2,4")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-ray", action="store_true")
    args = parser.parse_args()
    rows = int(args.gib * (1 << 30)) // (4 * 256)
    array = np.random.default_rng(0).random((rows, 256), dtype=np.float32)
    try:
        import ray  # noqa: F401
        with_ray = not args.no_ray
    except ImportError:
        with_ray = False
        print("Ray is not installed (pip install -e \".[bench]\"): --shard and --push only")
    results: dict[str, list[float]] = {}
    sizes = [int(n) for n in args.workers.split(",")]
    if with_ray:
        import ray

        # As many logical CPUs as workers (and Ray Train's controller): Ray would otherwise
        # wait for CPUs this machine does not have, where our workers share its cores.
        ray.init(num_cpus=max(sizes) + 2, include_dashboard=False, log_to_driver=False)
    for workers in sizes:
        cluster = TFCluster.start(workers)
        try:
            for round_ in range(args.rounds):
                for way in WAYS if round_ % 2 == 0 else WAYS[::-1]:
                    seconds, memory = one_way(cluster, way, array)
                    results.setdefault(f"{workers} {way} s", []).append(seconds)
                    results.setdefault(f"{workers} {way} memory", []).append(memory)
        finally:
            cluster.stop()
        if with_ray:
            for _ in range(args.rounds):
                read, whole = ray_round(array, workers)
                results.setdefault(f"{workers} ray data s", []).append(read)
                results.setdefault(f"{workers} ray fit s", []).append(whole)
    report(results, args, array.nbytes, with_ray)


def report(results: dict[str, list[float]], args, nbytes: int, with_ray: bool) -> None:
    def median(key: str) -> float:
        return statistics.median(results[key])

    print(f"{nbytes / (1 << 30):.2f} GiB float32, {args.rounds} rounds; medians "
          "(memory: the largest worker's RSS growth / a shard's bytes, 1/N of the array)")
    header = (f"{'workers':<8}{'shard s':>9}{'push s':>9}{'ctrl s':>9}{'shard/ctrl':>11}"
              f"{'shard mem':>11}{'push mem':>10}{'ctrl mem':>10}")
    print(header + (f"{'ray data s':>12}{'ray fit s':>11}" if with_ray else ""))
    for workers in (int(n) for n in args.workers.split(",")):
        shard, push = median(f"{workers} shard s"), median(f"{workers} push s")
        controller = median(f"{workers} controller s")
        line = (f"{workers:<8}{shard:>9.2f}{push:>9.2f}{controller:>9.2f}"
                f"{shard / controller:>10.2f}x"
                + "".join(f"{median(f'{workers} {way} memory'):>{w}.2f}x"
                          for way, w in zip(WAYS, (10, 9, 9))))
        if with_ray:
            ray_data, ray_fit = median(f"{workers} ray data s"), median(f"{workers} ray fit s")
            line += f"{ray_data:>12.2f}{ray_fit:>11.2f}"
        print(line)
    for key, values in results.items():
        print(f"  {key}: [{', '.join(f'{v:.2f}' for v in values)}]")


if __name__ == "__main__":
    main()
