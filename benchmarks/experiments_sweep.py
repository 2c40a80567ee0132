#!/usr/bin/env python
"""A sweep of 6 trials: on the warm cluster, as 6 floor runs, and with Ray Tune over Ray Train.

The same job (2 workers, MultiWorkerMirroredStrategy, Keras 3, the dense model of
bench.py, `--epochs` x `--steps`) with 6 learning rates, side by side in one run:

  tfmw    `%%tfdist --sweep lr=...` through the real magic on one warm cluster (started
          and warmed once, before the first round): the sweep's start to its end
  floor   each trial: 2 plain processes started with TF_CONFIG that import TensorFlow,
          make the strategy, fit and exit; the 6 trials one after the other
  ray     Ray Tune over Ray Train (one trial at a time), only when `import ray` works;
          ray.init is timed apart, as tfmw's start is

The side that goes first alternates by round. Prints medians [min-max], ratios and a
verdict against the floor. See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import datetime
import os
import signal
import sys

from tfmw_bench.common import attempt, cleanup, progress, terminate  # the package here
from tfmw_bench.magic_shell import MagicShell
from tfmw_bench.ray_train import ray_available
from tfmw_bench.report import machine_info, write_json
from tfmw_bench.runs_dir import scratch_directory
from tfmw_bench.sweep_contenders import (
    LEARNING_RATES,
    floor_sweep,
    summarize_sweep,
    sweep_job,
    tfmw_sweep,
)
from tfmw_bench.table import COMPARE, RULE, cell, goal_text, ratio_text, row

HERE = os.path.dirname(os.path.abspath(__file__))


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--rounds", type=int, default=5, help="rounds (default 5)")
    parser.add_argument("--epochs", type=int, default=3, help="epochs per trial (default 3)")
    parser.add_argument("--steps", type=int, default=50,
                        help="steps per epoch (default 50: bench.py's job, ~1 s a fit)")
    parser.add_argument("--skip-ray", action="store_true", help="no Ray even if installed")
    parser.add_argument("--ray-rounds", type=int, default=3, metavar="K",
                        help="Ray in the first K rounds only (default 3)")
    parser.add_argument("--json", default=os.path.join(HERE, "results", "sweep.json"))
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")
    return args


def print_table(report: dict) -> None:
    s, j, m = report["summary"], report["job"], report["machine"]
    ray = s["ray"]
    print(RULE)
    print("\n".join([
        f"sweep of {len(LEARNING_RATES)} trials  {report['date']}  {m['hostname']}, "
        f"{m['cores']} cores, load {report['load'][0]:.2f} -> {report['load'][1]:.2f}",
        f"job: 2 workers, {j['epochs']}x{j['steps_per_epoch']} steps per trial, Keras 3; "
        f"rounds {len(report['rounds'])}; ray: {report['ray']}",
        row(COMPARE, "metric (s)", "floor", "tfmw", "ratio", "goal"),
        row(COMPARE, "sweep wall time", cell(s["floor"]), cell(s["tfmw"]),
            ratio_text(s["ratios"]["floor"]), goal_text(s, "sweep_floor")),
        row(COMPARE, "  one trial", cell(s["floor_trial"]), cell(s["tfmw_trial"])),
        row(COMPARE, "vs Ray Tune over Ray Train", "ray", "tfmw", "tfmw/ray"),
        row(COMPARE, "sweep wall time", cell(ray), cell(s["tfmw"]),
            ratio_text(s["ratios"]["ray"])),
        row(COMPARE, "  ray.init (not in the sweep)", cell(s["ray_init"]), "-"),
    ]))
    print(RULE, flush=True)


def _round(entry, where, magic, job, workdir, use_ray, first_tfmw) -> None:
    from tfmw_bench.ray_tune import ray_tune_sweep

    sides = {"tfmw": lambda: tfmw_sweep(magic, job),
             "floor": lambda: floor_sweep(workdir, job)}
    if use_ray:
        sides["ray"] = lambda: ray_tune_sweep(job, LEARNING_RATES, workdir)
    for side in (list(sides) if first_tfmw else list(reversed(sides))):
        result = attempt(entry, side, where, sides[side])
        if result:
            progress(f"{where} {side}: sweep {result['wall']:.1f} s")


def main(argv=None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, terminate)
    workdir = scratch_directory("tfmw-sweep-bench-")
    job = sweep_job(args.epochs, args.steps)
    use_ray = not args.skip_ray and ray_available()
    report = {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
              "machine": machine_info(), "rounds": [], "load": [os.getloadavg()[0]],
              "ray": "installed" if use_ray else
              ("skipped (--skip-ray)" if args.skip_ray else "not installed"),
              "job": {"epochs": args.epochs, "steps_per_epoch": args.steps,
                      "learning_rates": list(LEARNING_RATES), "cell": job}}
    if not use_ray:
        progress(f"ray: {report['ray']}")
    magic, exit_code = MagicShell(), 0
    try:
        progress(f"%tfdist start: {magic.start():.1f} s")
        magic.cell("--no-dashboard --no-checkpoint", "lr = 0.01\n" + job)   # warm
        for index in range(args.rounds):
            entry = {"round": index + 1, "load_before": os.getloadavg()[0]}
            report["rounds"].append(entry)
            _round(entry, f"round {index + 1}/{args.rounds}", magic, job, workdir,
                   use_ray and index < args.ray_rounds, first_tfmw=index % 2 == 0)
    except KeyboardInterrupt:
        progress("interrupted: cleaning up")
        exit_code = 130
    finally:
        magic.stop()
        cleanup()
    report["load"].append(os.getloadavg()[0])
    report["summary"] = summarize_sweep(report["rounds"])
    print_table(report)
    write_json(report, args.json)
    progress(f"wrote {args.json}")
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
