#!/usr/bin/env python
"""What the preemption check costs a fit: the agreement on a SIGTERM at every k-th step.

bench.py's job cell (2 workers, tf-keras unless `--keras 3`; 3 epochs of 50 steps) runs on
one warm cluster with an automatic backup every epoch, in turns: without the check
(`grace=None`), with it at its default budget (keras_preemption.BUDGET, 1% of the steps'
time) and at a tenth of it. Printed: each side's median fit time (the workers' own `fit()` seconds,
the slower worker) and the median of the turns' ratios to the side without the check.
Goal: the default's ratio <= 1.02.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import tempfile

from tfmw_bench.common import WORKERS, job_cell, progress  # the package here

EPOCHS, STEPS = 3, 50
SIDES = {"no check": (None, 0.01), "default": (25.0, 0.01), "budget 0.1%": (25.0, 0.001)}


def set_budget(budget: float) -> None:
    """On a worker: the share of the fit's time the preemption check aims at."""
    from tfmw_notebook.worker.fits import keras_preemption

    keras_preemption.BUDGET = budget


def one_cell(cluster, job: str, side: str, backups: str) -> float:
    from tfmw_notebook.protocol.run_options import BackupPolicy, CellOptions

    grace, budget = SIDES[side]
    cluster.run(set_budget, budget)
    backup = BackupPolicy(directory=tempfile.mkdtemp(dir=backups), grace=grace)
    with contextlib.redirect_stdout(io.StringIO()):
        cluster.run(job, options=CellOptions(backup=backup))
    return max(cluster.pull(["bench_fit_seconds"], rank=rank)["bench_fit_seconds"]
               for rank in range(WORKERS))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--turns", type=int, default=10, help="turns of the sides (default 10)")
    parser.add_argument("--keras", type=int, choices=(2, 3), default=2)
    args = parser.parse_args(argv)
    from tfmw_notebook import TFCluster

    sides, job = list(SIDES), job_cell(EPOCHS, STEPS)
    cluster = TFCluster.start(WORKERS, keras=args.keras, gpus_per_worker=0, timeout=180)
    try:
        cluster.run(job)                                   # warm: traced, imported
        seconds: dict[str, list[float]] = {side: [] for side in sides}
        with tempfile.TemporaryDirectory(prefix="preemption-check-") as backups:
            for turn in range(args.turns):
                for side in sides[turn % len(sides):] + sides[:turn % len(sides)]:
                    seconds[side].append(one_cell(cluster, job, side, backups))
                progress(f"turn {turn + 1}/{args.turns}")
    finally:
        cluster.stop()
    print(f"Keras {args.keras}, {args.turns} turns, {EPOCHS} epochs of {STEPS} steps")
    base = seconds[sides[0]]
    for side in sides:
        ratio = statistics.median(s / b for s, b in zip(seconds[side], base))
        print(f"  {side:<10} fit {statistics.median(seconds[side]):6.3f} s   "
              f"ratio to no check {ratio:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
