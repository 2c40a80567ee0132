#!/usr/bin/env python
"""What freeing a fit's input pipeline off the cell's path buys: one warm cluster, A/B.

The job cell of bench.py (2 workers, Keras 3 unless `--keras 2`) runs on one warm cluster
with the workers' release thread (worker/data/input_release.py: the fit's tf.data iterators
are freed after the call, on a thread of their own) and without it (switched on the
workers to freeing in place, as Keras does), alternated, `--pairs` pairs. Prints each
side's cells (median [min-max]), how many stalled (the chief's or the other worker's fit
lasted over 0.15 s past its training loop), the training loops, and the ratio.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from tfmw_bench.common import WORKERS, job_cell, progress  # the package here

STALL_SECONDS = 0.15   # a fit this much longer than its training loop stalled after it


def use_release_thread(on: bool) -> None:
    """On a worker: free fit pipelines on the release thread (on) or in place (off)."""
    from tfmw_notebook.worker.data import input_release

    if not hasattr(input_release, "_bench_release"):
        input_release._bench_release = input_release._release
    input_release._release = input_release._bench_release if on else list.clear


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--pairs", type=int, default=10, help="off/on pairs (default 10)")
    parser.add_argument("--keras", type=int, choices=(2, 3), default=3)
    args = parser.parse_args(argv)
    if args.pairs < 1:
        parser.error("--pairs must be >= 1")
    return args


def one_cell(cluster, job: str) -> dict:
    from tfmw_notebook.protocol.run_options import CellOptions

    began = time.perf_counter()
    cluster.run(job, options=CellOptions())
    seconds = time.perf_counter() - began
    ranks = [cluster.pull(["bench_fit_seconds", "bench_loop_seconds"], rank=rank)
             for rank in range(WORKERS)]
    return {"cell": seconds, "loop": ranks[0]["bench_loop_seconds"],
            "stalled": any(r["bench_fit_seconds"] - r["bench_loop_seconds"] > STALL_SECONDS
                           for r in ranks)}


def summary(cells: list[dict], key: str) -> str:
    values = [cell[key] for cell in cells]
    return f"{statistics.median(values):.3f} [{min(values):.3f}-{max(values):.3f}]"


def main(argv=None) -> int:
    args = parse_args(argv)
    from tfmw_notebook import TFCluster

    job = job_cell(3, 50)
    cluster = TFCluster.start(WORKERS, keras=args.keras, gpus_per_worker=0, timeout=180)
    try:
        cluster.run(job)                                   # warm: traced, imported
        cells: dict[bool, list[dict]] = {False: [], True: []}
        for index in range(args.pairs):
            for on in ((True, False) if index % 2 == 0 else (False, True)):
                cluster.run(use_release_thread, on)
                cells[on].append(one_cell(cluster, job))
            progress(f"pair {index + 1}/{args.pairs}: off {cells[False][-1]['cell']:.2f} s, "
                     f"on {cells[True][-1]['cell']:.2f} s")
    finally:
        cluster.stop()
    print(f"Keras {args.keras}, {args.pairs} pairs; release thread off | on")
    for label, key in (("cell s", "cell"), ("training loop s (chief)", "loop")):
        print(f"  {label:<24} {summary(cells[False], key):>22} | {summary(cells[True], key)}")
    for on in (False, True):
        stalled = sum(cell["stalled"] for cell in cells[on])
        print(f"  stalled cells, release thread {'on ' if on else 'off'}: "
              f"{stalled}/{len(cells[on])}")
    ratio = (statistics.median(c["cell"] for c in cells[True])
             / statistics.median(c["cell"] for c in cells[False]))
    print(f"  median cell on/off: {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
