#!/usr/bin/env python
"""Exact resume under faults, and what it costs a fit that nothing disturbs.

    python benchmarks/fault_resume.py [--runs 10] [--faults 4] [--turns 10] [--seed S]

Faults: one real kernel with a 2-worker cluster runs tests/test_exact_resume.py's fit
(a seeded `shuffle(seed=1).repeat().batch(64).map().prefetch(2)` pipeline, 5 epochs of
10 steps, `--max-restarts 3 --backup-every 10`), once undisturbed per Keras, then
`--runs` times (tf-keras and Keras 3 in turns) with `--faults` faults at steps and ranks
drawn from `--seed`: a SIGKILL, a SIGTERM (the preemption check's budget raised so that
it runs about every step, as in the test), the chief killed inside a backup write, and
the kernel's interrupt followed by the same cell run again (same --checkpoint-dir).
Each run's weights (sha256 of each) are compared with its Keras' undisturbed run.

Cost: bench.py's job cell (3 epochs of 50 steps) on one warm cluster of the Python API,
in alternated turns: without a backup, with the defaults of `--max-restarts` (a backup
each epoch, the preemption check at its default budget), the same without the check
(`--grace off`), and `--backup-every 10`; and the defaults and `--backup-every 10` with
the backups written as the Keras writes them ("inline": on the training thread of every
worker, as before worker/writes/tf_keras_backup_writes.py and keras3_backup_writes.py).
Printed: each side's median fit time (the workers' own `fit()` seconds, the slower
worker) and the median of the turns' ratios to the side without; and the seconds spent
inside exact resume's callbacks (the fit's BackupAndRestore, the package's resume point
and notice; apart, the preemption check; the busier worker), against the fit without:
steadier than whole fits on a shared machine. Goal: the defaults' cost <= 2%. The load average is
printed beside both parts (shared machines).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import pathlib
import random
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

from kernel_session import kernel_with_cluster  # noqa: E402 (the tests' kernel driver)
from test_exact_resume import trained  # noqa: E402 (the test's fit and fault hooks)
from tfmw_bench.common import WORKERS, job_cell, progress  # noqa: E402

KINDS = ("SIGKILL", "SIGTERM", "WRITE", "INTERRUPT")
EPOCHS, STEPS = 3, 50
# Each side's backup frequency and grace (None: no preemption check).
SIDES = {"no backup": (None, None), "defaults": ("epoch", 25.0),
         "no check": ("epoch", None), "every 10": (10, 25.0)}
# The sides that write their backups as the Keras does it, on the training thread of every
# worker (the package's own writes undone for them: what each fit paid before them).
INLINE = {"inline": "defaults", "inline 10": "every 10"}
PARTS = ("backup", "build", "check")
BUDGET = ("%%tfdist\nfrom tfmw_notebook.worker.fits import keras_preemption\n"
          "keras_preemption.BUDGET = 1.0")


def schedule(draw: random.Random, faults: int) -> tuple[list[int], list[str], list[int]]:
    """Steps (2-49), kinds and ranks of one run's faults. A fault after a write kill
    comes 12 steps later at least (the kill lands at the next backup, up to 10 steps
    on); after a SIGTERM 4 (it backs up at the next step the workers agree on)."""
    kinds = [KINDS[i % len(KINDS)] for i in range(faults)]
    for _ in range(10000):
        draw.shuffle(kinds)
        steps = sorted(draw.sample(range(2, 50), faults))
        gaps = [12 if kind == "WRITE" else 4 if kind == "SIGTERM" else 2 for kind in kinds]
        if all(b - a >= gap for a, b, gap in zip(steps, steps[1:], gaps)):
            ranks = [0 if kind == "WRITE" else draw.randrange(2) for kind in kinds]
            return steps, list(kinds), ranks
    raise ValueError(f"{faults} faults do not fit in 48 steps with their gaps")


def fault_runs(args, folder: pathlib.Path) -> list[dict]:
    """Every run's faults, verdict and seconds."""
    draw, runs = random.Random(args.seed), []
    with kernel_with_cluster(str(folder)) as kernel:
        kernel.ok(BUDGET)
        undisturbed = {keras: trained(kernel, fresh(folder / f"u{keras}"), kind="dataset",
                                      keras=keras)[0] for keras in (2, 3)}
        for run in range(args.runs):
            keras = 2 + run % 2
            steps, kinds, ranks = schedule(draw, args.faults)
            where = fresh(folder / f"r{run}")
            began = time.monotonic()
            try:
                result, _ = trained(kernel, where, kind="dataset", keras=keras, kills=steps,
                                    ranks=ranks, signals=kinds)
                verdict = "equal" if result["sha256"] == undisturbed[keras]["sha256"] \
                    else "UNEQUAL"
            except (AssertionError, TimeoutError) as error:   # a failed run is counted
                verdict = f"FAILED ({str(error).splitlines()[0][:80]})"
            runs.append({"keras": keras, "faults": list(zip(kinds, steps, ranks)),
                         "verdict": verdict, "seconds": time.monotonic() - began})
            progress(f"run {run + 1}/{args.runs}: {verdict}")
    return runs


def fresh(folder: pathlib.Path) -> pathlib.Path:
    folder.mkdir()
    return folder


def backup_policy(side: str, folder: str):
    from tfmw_notebook.protocol.run_options import BackupPolicy

    every, grace = SIDES[INLINE.get(side, side)]
    if every is None:
        return None
    return BackupPolicy(directory=tempfile.mkdtemp(dir=folder), save_freq=every, grace=grace)


def cost_turns(turns: int, keras: int) -> dict[str, list[float]]:
    """Each side's fit seconds (the slower worker), turn by turn, sides alternated."""
    from tfmw_notebook import TFCluster
    from tfmw_notebook.protocol.run_options import CellOptions

    sides, job = sides_of(keras), job_cell(EPOCHS, STEPS) + READ_SECONDS
    cluster = TFCluster.start(WORKERS, keras=keras, gpus_per_worker=0, timeout=180)
    seconds: dict[str, list[float]] = {side: [] for side in sides}
    seconds.update({f"{side} {part}": [] for side in sides for part in PARTS})
    try:
        cluster.run(time_resume_callbacks, keras)
        cluster.run(job)                                   # warm: traced, imported
        with tempfile.TemporaryDirectory(prefix="fault-resume-") as folder:
            for turn in range(turns):
                for side in sides[turn % len(sides):] + sides[:turn % len(sides)]:
                    options = CellOptions(backup=backup_policy(side, folder))
                    cluster.run(write_backups_inline, side in INLINE, keras)
                    with contextlib.redirect_stdout(io.StringIO()):
                        cluster.run(job, options=options)
                    pulled = [cluster.pull(["bench_fit_seconds", "bench_resume_seconds"],
                                           rank=r) for r in range(WORKERS)]
                    seconds[side].append(max(p["bench_fit_seconds"] for p in pulled))
                    for part in PARTS:   # the busier worker's
                        seconds[f"{side} {part}"].append(
                            max(p["bench_resume_seconds"][part] for p in pulled))
                progress(f"cost turn {turn + 1}/{turns}")
    finally:
        cluster.stop()
    return seconds


def sides_of(keras: int) -> list[str]:
    return list(SIDES) + list(INLINE)


def write_backups_inline(inline: bool, keras: int) -> None:
    """On a worker: the backups written as the Keras writes them (inline) or by the
    chief's writer thread (tf_keras_backup_writes.py, keras3_backup_writes.py)."""
    if keras == 3:
        from keras.src.callbacks.backup_and_restore import BackupAndRestore

        BackupAndRestore._tfmw_inline = inline   # keras3_backup_writes' own switch
        return
    from tf_keras.src.distribute.worker_training_state import WorkerTrainingState as state

    for name in ("back_up", "delete_backup"):
        method = getattr(state, f"_bench_{name}", None) or getattr(state, name)
        setattr(state, f"_bench_{name}", method)
        setattr(state, name, getattr(method, "__wrapped__", method) if inline else method)


# Appended to the job cell: the seconds the fit spent in exact resume's callbacks.
READ_SECONDS = """
from tfmw_notebook.worker.fits import keras_preemption as _kp
bench_resume_seconds = dict(_kp.bench_seconds)
_kp.bench_seconds.update(dict.fromkeys(_kp.bench_seconds, 0.0))
"""


def time_resume_callbacks(keras: int) -> None:
    """On a worker: every call of the fit's BackupAndRestore and of the package's resume
    point, resume notice and preemption check adds its seconds to a sum the job cell
    reads (READ_SECONDS); the optimizer's build made inside the backup's callbacks
    (tf-keras' BackupAndRestore builds it at the fit's start; a fit without one builds it
    at its first step) to "build", not to "backup"."""
    import functools
    import importlib
    import time

    from tfmw_notebook.worker.fits import keras_preemption, keras_resume_notice, keras_resume_point

    sums = keras_preemption.bench_seconds = {"backup": 0.0, "build": 0.0, "check": 0.0}
    inside: list[str] = []    # the parts under way, outermost first
    package = importlib.import_module("tf_keras" if keras == 2 else "keras")
    backup = package.callbacks
    for cls, part in ((package.optimizers.SGD, "build"), (backup.BackupAndRestore, "backup"),
                      (keras_resume_point.ResumePoint, "backup"),
                      (keras_resume_notice.ResumeNotice, "backup"),
                      (keras_preemption.PreemptionSave, "check")):
        for name, method in list(vars(cls).items()):
            if (name.startswith("on_") or (part, name) == ("build", "build")) \
                    and callable(method):
                def timed(*args, _method=method, _part=part, **kwargs):
                    began, outer = time.perf_counter(), inside[-1] if inside else None
                    inside.append(_part)
                    try:
                        return _method(*args, **kwargs)
                    finally:
                        inside.pop()
                        spent = time.perf_counter() - began
                        if _part != "build":
                            sums[_part] += spent
                        elif outer == "backup":   # out of the backup's time, into build's
                            sums["build"] += spent
                            sums["backup"] -= spent
                setattr(cls, name, functools.wraps(method)(timed))


def load() -> str:
    return "load average " + " ".join(f"{value:.1f}" for value in os.getloadavg())


def print_runs(runs: list[dict], faults: int) -> None:
    print(f"Faults: {len(runs)} runs x {faults} faults (kind@step/rank)")
    for number, run in enumerate(runs, 1):
        what = ", ".join(f"{kind}@{step}/{rank}" for kind, step, rank in run["faults"])
        print(f"  run {number:2d}  Keras {run['keras']}  {what:<58} {run['verdict']:<8} "
              f"{run['seconds']:5.1f} s")
    equal = sum(run["verdict"] == "equal" for run in runs)
    print(f"  equal {equal}, unequal {sum(run['verdict'] == 'UNEQUAL' for run in runs)}, "
          f"failed {sum(run['verdict'].startswith('FAILED') for run in runs)} "
          f"of {len(runs)} runs ({len(runs) * faults} faults)")


def print_cost(seconds: dict[str, list[float]], keras: int) -> None:
    turns = len(seconds["no backup"])
    print(f"Cost: Keras {keras}, {turns} turns, {EPOCHS} epochs of {STEPS} steps")
    base = seconds["no backup"]
    for side in [side for side in (*SIDES, *INLINE) if side in seconds]:
        ratio = statistics.median(s / b for s, b in zip(seconds[side], base))
        row = f"  {side:<10} fit {statistics.median(seconds[side]):6.3f} s  ratio {ratio:.3f}"
        for part in PARTS:
            spent = seconds[f"{side} {part}"]
            share = statistics.median(c / b for c, b in zip(spent, base))
            row += f"   {part} {statistics.median(spent) * 1000:4.0f} ms {share:5.1%}"
        print(row)
    print("  (backup: the fit's BackupAndRestore, resume point and notice; build: the "
          "optimizer's build inside them (tf-keras builds it there, a fit without a backup "
          "at its first step); check: the preemption check, its all-reduce's wait for the "
          "other worker included; % of the fit without a backup; inline: the backups "
          "written on every worker's training thread by the Keras, as before "
          "*_backup_writes.py)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--faults", type=int, default=4, help="faults per run (default 4)")
    parser.add_argument("--turns", type=int, default=10, help="cost turns (default 10)")
    parser.add_argument("--keras", type=int, choices=(2, 3), default=2, help="cost's Keras")
    parser.add_argument("--seed", type=int, default=random.SystemRandom().randrange(10**6))
    args = parser.parse_args(argv)
    print(f"seed {args.seed}; {load()}", flush=True)
    runs = []
    if args.runs:   # --runs 0: the cost alone
        with tempfile.TemporaryDirectory(prefix="fault-resume-") as folder:
            runs = fault_runs(args, pathlib.Path(folder))
        print_runs(runs, args.faults)
        print(f"  ({load()} after the runs)", flush=True)
    if args.turns:   # --turns 0: the faults alone
        seconds = cost_turns(args.turns, args.keras)
        print_cost(seconds, args.keras)
        print(f"  ({load()} after the turns)")
    return 0 if all(run["verdict"] == "equal" for run in runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
