"""Scaling on one machine: `%tfdist start -n N` and a warm training cell against N
hand-made TF_CONFIG workers, for N = 2, 4, 8 (boot, warm cell, peak memory per worker),
and the trivial cell's round trip at each N.

    python benchmarks/scaling.py [--sizes 2 4 8] [--rounds 3]

Each round runs, for every N in turn, the floor (N processes started here with
TF_CONFIG, each fitting the job twice: the second fit is the warm one) and then tfmw
(TFCluster.start(N), the job twice, 20 trivial cells, stop). The job is bench.py's dense
job with 3 x 20 steps: the global batch stays 64, so each worker gets 64 / N.
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from tfmw_bench.common import cleanup, job_cell, live_clusters, progress  # noqa: E402
from tfmw_bench.floor import run_floor  # noqa: E402
from tfmw_bench.table import row  # noqa: E402

GOALS = "goals: boot at N = 8 <= 1.30x; warm cell <= 1.05x at each N; trivial < 50 ms at N = 8"
LAYOUT = ((0, ">3"), (2, ">16"), (2, ">16"), (2, ">7"), (2, ">14"), (2, ">14"), (2, ">7"),
          (2, ">11"), (2, ">11"), (2, ">10"))


def peak_rss_mb(pid: int) -> float | None:
    """The process's peak resident memory (VmHWM), as getrusage's ru_maxrss gives it."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def tfmw_round(size: int, job: str, trivial: int) -> dict:
    from tfmw_notebook import TFCluster
    from tfmw_notebook.run_options import CellOptions

    began = time.perf_counter()
    cluster = TFCluster.start(size, timeout=300)
    live_clusters.append(cluster)
    result = {"boot": time.perf_counter() - began, "cells": []}
    try:
        for _ in range(2):
            began = time.perf_counter()
            cluster.run(job, options=CellOptions(), timeout=600)
            result["cells"].append(time.perf_counter() - began)
        result["trivial_ms"] = []
        for _ in range(trivial):
            began = time.perf_counter()
            cluster.run("x = 1", options=CellOptions(), timeout=60)
            result["trivial_ms"].append((time.perf_counter() - began) * 1000)
        result["peak_rss_mb"] = [peak_rss_mb(w.pid) for w in cluster.workers]
    finally:
        cluster.stop()
        live_clusters.remove(cluster)
    return result


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def text(value, digits=2, unit=""):
    return "-" if value is None else f"{value:.{digits}f}{unit}"


def spread(values, digits=2):
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    return f"{statistics.median(values):.{digits}f} [{min(values):.{digits}f}-" \
           f"{max(values):.{digits}f}]"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--trivial", type=int, default=20)
    args = parser.parse_args(argv)
    workdir = tempfile.mkdtemp(prefix="tfmw-scaling-")
    atexit.register(shutil.rmtree, workdir, ignore_errors=True)
    os.environ["IPYTHONDIR"] = os.path.join(workdir, "ipython")
    job = job_cell(3, 20)
    cell_path = os.path.join(workdir, "job_cell.py")
    with open(cell_path, "w") as f:
        f.write(job)
    results = {size: {"floor": [], "tfmw": []} for size in args.sizes}
    progress(f"load average {os.getloadavg()[0]:.2f}; sizes {args.sizes}, "
             f"{args.rounds} rounds")
    try:
        for index in range(args.rounds):
            for size in args.sizes:
                floor = run_floor(workdir, cell_path, fits=2, size=size, timeout=600)
                results[size]["floor"].append(floor)
                tfmw = tfmw_round(size, job, args.trivial)
                results[size]["tfmw"].append(tfmw)
                progress(f"round {index + 1} N={size}: floor boot {floor['boot']:.1f} s, warm "
                         f"{floor['cells'][1]:.2f} s; tfmw boot {tfmw['boot']:.1f} s, warm "
                         f"{tfmw['cells'][1]:.2f} s, trivial "
                         f"{statistics.median(tfmw['trivial_ms']):.1f} ms; load "
                         f"{os.getloadavg()[0]:.2f}")
    except KeyboardInterrupt:
        progress("interrupted")
    finally:
        cleanup()
    print(GOALS)
    print(row(LAYOUT, "N", "floor boot s", "tfmw boot s", "ratio", "floor warm s",
              "tfmw warm s", "ratio", "floor MB/w", "tfmw MB/w", "trivial ms"))
    for size, runs in results.items():
        floors, tfmws = runs["floor"], runs["tfmw"]
        if not floors or not tfmws:
            continue
        boot_f, boot_t = [f["boot"] for f in floors], [t["boot"] for t in tfmws]
        warm_f, warm_t = [f["cells"][1] for f in floors], [t["cells"][1] for t in tfmws]
        mem_f = median([median(f["peak_rss_mb"]) for f in floors])
        mem_t = median([median(t["peak_rss_mb"]) for t in tfmws])
        trivial = median([ms for t in tfmws for ms in t["trivial_ms"]])
        print(row(LAYOUT, size, spread(boot_f, 1), spread(boot_t, 1),
                  text(median(boot_t) / median(boot_f), unit="x"), spread(warm_f),
                  spread(warm_t), text(median(warm_t) / median(warm_f), unit="x"),
                  text(mem_f, 0), text(mem_t, 0), text(trivial, 1)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
