"""A sweep of the job over learning rates: on the warm cluster, and as the floor does it.

tfmw: `%%tfdist --sweep lr=...` through the real magic on one warm cluster (each trial
a cell on the same workers, with its run record). The floor: each trial is 2 plain
processes started with TF_CONFIG that import TensorFlow, make the strategy, fit once
and exit (floor.py), one trial after the other. Every trial runs the same cell, its
learning rate bound as `lr`.
"""

from __future__ import annotations

import os
import time

from .common import CELL_TIMEOUT, BenchError, job_cell
from .floor import run_floor
from .magic_shell import MagicShell

LEARNING_RATES = (0.001, 0.002, 0.005, 0.01, 0.02, 0.03)


def sweep_job(epochs: int, steps: int) -> str:
    """The benchmark's job cell, its SGD's learning rate read from `lr`."""
    cell = job_cell(epochs, steps)
    fixed = "SGD(learning_rate=0.01)"
    if fixed not in cell:
        raise BenchError("the job cell no longer sets SGD(learning_rate=0.01)")
    return cell.replace(fixed, "SGD(learning_rate=lr)")


def tfmw_sweep(magic: MagicShell, job: str, rates=LEARNING_RATES) -> dict:
    """The whole sweep as the notebook waits for it: the magic's start to its end."""
    flags = (f"--sweep lr={','.join(repr(r) for r in rates)} --monitor loss "
             f"--no-dashboard --no-checkpoint --timeout {CELL_TIMEOUT:g}")
    wall = magic.cell(flags, job)
    result = magic.value
    counts = result.counts() if result is not None else {}
    if counts != {"completed": len(rates)}:
        raise BenchError(f"tfmw sweep: {result.summary() if result else 'no result'}")
    return {"wall": wall, "trials": [t.seconds for t in result.trials],
            "final_loss": [t.final() for t in result.trials]}


def floor_sweep(workdir: str, job: str, rates=LEARNING_RATES) -> dict:
    """One floor run per trial (start, import, strategy, fit, exit), one after the other."""
    trials, boots, losses = [], [], []
    began = time.perf_counter()
    for number, rate in enumerate(rates, start=1):
        path = os.path.join(workdir, f"sweep_trial_{number}.py")
        with open(path, "w") as f:
            f.write(f"lr = {rate!r}\n" + job)
        run = run_floor(workdir, path, fits=1)
        trials.append(run["wall"])
        boots.append(run["boot"])
        losses.append(run["loss"])
    return {"wall": time.perf_counter() - began, "trials": trials, "boots": boots,
            "final_loss": losses}


SWEEP_GOAL = ("<", 1.0, "< 1.00x (faster than the floor)")
SIDES = ("tfmw", "floor", "ray")


def summarize_sweep(rounds: list[dict]) -> dict:
    """Each side's sweep wall time and trial time (medians [min-max]), tfmw's ratios to
    the floor and to Ray (of medians), and the verdict against the floor, judged on the
    rounds that ran both (one sweep a side a round: medians, resampled by round)."""
    from .report import judge, stats

    def walls(side):
        return [r[side]["wall"] for r in rounds if "wall" in r.get(side, {})]

    s = {side: stats(walls(side)) for side in SIDES}
    for side in ("tfmw", "floor"):
        s[f"{side}_trial"] = stats(t for r in rounds for t in r.get(side, {}).get("trials", []))
    s["ray_init"] = stats(r["ray"]["init"] for r in rounds if "init" in r.get("ray", {}))
    s["ratios"] = {other: s["tfmw"]["median"] / s[other]["median"]
                   if s["tfmw"] and s[other] else None for other in ("floor", "ray")}
    pairs = [([r["tfmw"]["wall"]], [r["floor"]["wall"]]) for r in rounds
             if "wall" in r.get("tfmw", {}) and "wall" in r.get("floor", {})]
    op, bound, text = SWEEP_GOAL
    s["goals"] = {"sweep_floor": {"goal": text, **judge(pairs, "sweep_floor", op, bound)}}
    return s
