"""Scaling on one machine: `%tfdist start -n N` and a warm training cell against N
hand-made TF_CONFIG workers, for N = 2, 4, 8, 12, 16 (boot, warm cell, peak memory per worker),
and the trivial cell's round trip at each N, with a verdict on each goal.

    python benchmarks/scaling.py [--sizes 2 4 8 12 16] [--rounds 5] [--json PATH]
    python benchmarks/scaling.py --report PATH      # the table of a saved run again

Each round runs, for every N in turn, the floor (N processes started here with
TF_CONFIG, fitting the job 1 + WARM times: the later fits are the warm ones) and tfmw
(TFCluster.start(N), the job 1 + WARM times, 20 trivial cells, stop); which of the two
goes first alternates from round to round. The floor's warm cell lasts until all N of
its workers finished the fit, as a tfmw cell does (with 4 workers most cells have one
that stalls after its last step: docs/benchmarks.md). The job is bench.py's dense job with
3 x 20 steps: the global batch stays 64, so each worker gets 64 / N. Verdicts are
bench.py's: fast modes (10th percentiles) compared, a 90% interval from resampling
whole rounds, "inconclusive" when it straddles the goal.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from tfmw_bench.common import cleanup, job_cell, live_clusters, progress  # noqa: E402
from tfmw_bench.floor import run_floor  # noqa: E402
from tfmw_bench.report import judge, machine_info, write_json  # noqa: E402
from tfmw_bench.table import goal_text, row  # noqa: E402

# Warm cells per round on each side: with 3, N = 4's verdict flipped (2-4 TensorFlow
# processes per core make single cells vary 2-3x).
WARM = 5
# The goals of issue "scale": boot at N = 12-16 and the trivial cell at N = 12 (each
# judged at the largest N measured when those are not).
BOOT_GOAL = ("<=", 1.20, "boot at N = {n} <= 1.20x", (12, 16))
WARM_GOAL = ("<=", 1.05, "warm cell <= 1.05x")
TRIVIAL_GOAL = ("<", 25.0, "trivial cell at N = {n} < 25 ms", (12,))
LAYOUT = ((0, ">3"), (2, ">16"), (2, ">16"), (2, ">7"), (2, ">16"), (2, ">16"), (2, ">7"),
          (2, ">10"), (2, ">9"), (2, ">10"))


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
    from tfmw_notebook.protocol.run_options import CellOptions

    began = time.perf_counter()
    cluster = TFCluster.start(size, timeout=300, gpus_per_worker=0)   # the floor hides GPUs
    live_clusters.append(cluster)
    result = {"boot": time.perf_counter() - began, "cells": []}
    try:
        for _ in range(1 + WARM):
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


def _pairs(runs: dict, what: str) -> list[tuple]:
    """Per round: (tfmw's samples, the floor's samples), as bench.py's verdicts take them."""
    pairs = []
    for floor, tfmw in zip(runs["floor"], runs["tfmw"]):
        if what == "boot":
            pairs.append(([tfmw["boot"]], [floor["boot"]]))
        elif what == "warm":
            # The floor's cell until all N workers finished it, as tfmw's cell waits for all.
            pairs.append((tfmw["cells"][1:], floor["cells_all"][1:]))
        else:
            pairs.append((tfmw["trivial_ms"], None))
    return pairs


def verdicts(results: dict) -> dict:
    """Goal text -> judged goal, for every N measured (boot and trivial at the largest)."""
    out = {}
    for size, runs in results.items():
        op, bound, name = WARM_GOAL
        out[f"N = {size}: {name}"] = judge(_pairs(runs, "warm"), "warm", op, bound)
    for what, key, (op, bound, name, where) in (("boot", "boot", BOOT_GOAL),
                                                ("trivial", "trivial_ms", TRIVIAL_GOAL)):
        for size in [size for size in results if size in where] or [max(results)]:
            out[name.format(n=size)] = judge(_pairs(results[size], what), key, op, bound)
    return out


def print_table(results: dict) -> None:
    print(row(LAYOUT, "N", "floor boot s", "tfmw boot s", "ratio", "floor warm s",
              "tfmw warm s", "ratio", "floor MB/w", "tfmw MB/w", "trivial ms"))
    for size, runs in results.items():
        floors, tfmws = runs["floor"], runs["tfmw"]
        boot_f, boot_t = [f["boot"] for f in floors], [t["boot"] for t in tfmws]
        warm_f = [v for f in floors for v in f["cells_all"][1:]]
        warm_t = [v for t in tfmws for v in t["cells"][1:]]
        print(row(LAYOUT, size, spread(boot_f, 1), spread(boot_t, 1),
                  text(median(boot_t) / median(boot_f), unit="x"), spread(warm_f),
                  spread(warm_t), text(median(warm_t) / median(warm_f), unit="x"),
                  text(median([median(f["peak_rss_mb"]) for f in floors]), 0),
                  text(median([median(t["peak_rss_mb"]) for t in tfmws]), 0),
                  text(median([ms for t in tfmws for ms in t["trivial_ms"]]), 1)))
    print("(medians [min-max] over rounds; ratios of medians; verdicts below compare "
          "fast modes)")
    for name, goal in verdicts(results).items():
        key = "trivial_ms" if "trivial" in name else "ratio"
        print("  " + goal_text({"goals": {key: {"goal": name, **goal}}}, key))


def _complete(results: dict) -> dict:
    """Only the sizes and rounds where both sides finished (an interrupt ends a round)."""
    out = {}
    for size, runs in results.items():
        count = min(len(runs["floor"]), len(runs["tfmw"]))
        if count:
            out[size] = {side: runs[side][:count] for side in ("floor", "tfmw")}
    return out


def _round(index: int, size: int, workdir: str, cell_path: str, job: str, trivial: int,
           results: dict) -> None:
    def floor():
        results[size]["floor"].append(
            run_floor(workdir, cell_path, fits=1 + WARM, size=size, timeout=600))

    def tfmw():
        results[size]["tfmw"].append(tfmw_round(size, job, trivial))

    for side in ((floor, tfmw) if index % 2 == 0 else (tfmw, floor)):
        side()
    f, t = results[size]["floor"][-1], results[size]["tfmw"][-1]
    progress(f"round {index + 1} N={size}: floor boot {f['boot']:.1f} s, warm "
             f"{statistics.median(f['cells_all'][1:]):.2f} s; tfmw boot {t['boot']:.1f} s, warm "
             f"{statistics.median(t['cells'][1:]):.2f} s, trivial "
             f"{statistics.median(t['trivial_ms']):.1f} ms; load {os.getloadavg()[0]:.2f}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[2, 4, 8, 12, 16])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--trivial", type=int, default=20)
    parser.add_argument("--json", default=None, metavar="PATH", help="write the results here")
    parser.add_argument("--report", default=None, metavar="PATH",
                        help="print the table of a saved run (its JSON) again; runs nothing")
    args = parser.parse_args(argv)
    if args.report:
        with open(args.report) as f:
            saved = json.load(f)
        print_table({int(size): runs for size, runs in saved["results"].items()})
        return 0
    if args.rounds < 1 or min(args.sizes) < 1:
        parser.error("--rounds and every --sizes value must be >= 1")
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
                _round(index, size, workdir, cell_path, job, args.trivial, results)
    except KeyboardInterrupt:
        progress("interrupted")
    finally:
        cleanup()
    results = _complete(results)
    if results:
        print_table(results)
        if args.json:
            write_json({"machine": machine_info(), "args": vars(args), "warm_cells": WARM,
                        "results": results}, args.json)
            progress(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
