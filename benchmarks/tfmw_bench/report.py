"""The report: machine, job, rounds, then summary statistics, ratios and goals, as JSON."""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import platform
import random
import socket
import statistics

from . import keras_choice
from .common import JOBS, WORKERS

GOALS = {  # metric -> (comparison, bound, text)
    "boot": ("<=", 1.30, "<= 1.30x"),
    "fit_warm": ("<=", 1.05, "<= 1.05x"),
    "loop_warm": ("<=", 1.05, "<= 1.05x"),
    "all_warm": ("<=", 1.05, "<= 1.05x"),
    "dashboard": (">=", 0.97, ">= 0.97x"),
    "default_cell": ("<=", 1.05, "<= 1.05x"),
    "trivial_ms": ("<", 50.0, "< 50 ms"),
}

# Summary key -> (path into a round, which fit of a list: None = the value as it is).
# The order is the JSON's.
COLUMNS = {
    "floor_boot": (("floor", "boot"), None),
    "floor_cell": (("floor", "cells"), 0),
    "floor_warm_cell": (("floor", "warm_cell"), None),
    "floor_fit": (("floor", "warm_fit"), None),
    "tfmw_boot": (("tfmw", "boot"), None),
    "tfmw_cold_cell": (("tfmw", "cold", "seconds"), None),
    "tfmw_cold_fit": (("tfmw", "cold", "fit"), None),
    "tfmw_warm_cell": (("tfmw", "warm", "seconds"), None),
    "tfmw_warm_fit": (("tfmw", "warm", "fit"), None),
    "tfmw_stop": (("tfmw", "stop"), None),
    "dashboard_off_cell": (("tfmw", "dashboard", "off", "seconds"), None),
    "dashboard_on_cell": (("tfmw", "dashboard", "on", "seconds"), None),
    "dashboard_on_finish": (("tfmw", "dashboard", "on", "finish"), None),
    "dashboard_off_kernel_cpu": (("tfmw", "dashboard", "off", "kernel_cpu"), None),
    "dashboard_on_kernel_cpu": (("tfmw", "dashboard", "on", "kernel_cpu"), None),
    "default_cell": (("tfmw", "dashboard", "default", "seconds"), None),
    "default_kernel_cpu": (("tfmw", "dashboard", "default", "kernel_cpu"), None),
    "in_place_cell": (("tfmw", "dashboard", "in_place", "seconds"), None),
    "ray_init": (("ray", "init"), None),
    "ray_first": (("ray", "first"), None),
    "ray_second": (("ray", "second"), None),
    "threads_default_warm_fit": (("threads", "default", "fits"), 1),
    "threads_split_warm_fit": (("threads", "split", "fits"), 1),
    "threads_default_cold_fit": (("threads", "default", "fits"), 0),
    "threads_split_cold_fit": (("threads", "split", "fits"), 0),
}


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def machine_info() -> dict:
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    return {
        "hostname": socket.gethostname(),
        "cpu_model": cpu,
        "cores": os.cpu_count(),
        "usable_cores": usable,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "tensorflow": _version("tensorflow") or _version("tensorflow-cpu"),
        "tf_keras": _version("tf-keras"),
        "ipyparallel": _version("ipyparallel"),
        "tfmw_notebook": _version("tfmw-notebook") or _version("tfmw_notebook"),
        "ray": _version("ray"),
        "loadavg_at_start": list(os.getloadavg()),
    }


def new_report(args, job: str, ray_status: str) -> dict:
    """Everything known before the first round; rounds are appended as they run."""
    return {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": machine_info(),
        "args": {k: v for k, v in vars(args).items() if k != "json"},
        "job": {"name": args.job, "workers": WORKERS, **JOBS[args.job], "epochs": args.epochs,
                "steps_per_epoch": args.steps, "steps": args.epochs * args.steps,
                "keras": keras_choice.name(), "strategy": "MultiWorkerMirroredStrategy",
                "cell": job},
        "rounds": [],
        "ray": ray_status,
        "complete": False,
    }


def write_json(report: dict, path: str) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(report, f, indent=2)


# -- summary ----------------------------------------------------------------------------

def stats(values) -> dict | None:
    values = sorted(v for v in values if v is not None)
    if not values:
        return None
    out = {"n": len(values), "median": statistics.median(values), "min": values[0],
           "max": values[-1], "stdev": statistics.stdev(values) if len(values) > 1 else None,
           "iqr": None}
    if len(values) >= 4:
        q = statistics.quantiles(values, n=4)
        out["iqr"] = q[2] - q[0]
    if len(values) >= 10:
        out["p90"] = statistics.quantiles(values, n=10)[-1]
    return out


def ratio(numerator: dict | None, denominator: dict | None) -> float | None:
    if not numerator or not denominator or not denominator["median"]:
        return None
    return numerator["median"] / denominator["median"]


def _ok(entry):
    return entry if isinstance(entry, dict) and "error" not in entry else None


def _column(rounds: list[dict], path) -> list:
    """The value at `path` in every round that has one (failed contenders skipped)."""
    values = []
    for entry in rounds:
        node = entry
        for key in path:
            node = _ok(node)
            if node is None:
                break
            node = node.get(key)
        if node is not None and not isinstance(node, dict):
            values.append(node)
    return values


def _pick(value, index):
    return value[index] if index is not None and isinstance(value, list) else value


def summarize(rounds: list[dict], steps: int) -> dict:
    s = {key: stats(_pick(v, index) for v in _column(rounds, path))
         for key, (path, index) in COLUMNS.items()}
    for side in ("floor", "tfmw"):   # every start-up of a round: the cold one and the extras
        s[f"{side}_boot"] = stats(
            boot for entry in rounds if _ok(entry.get(side)) and "boot" in entry[side]
            for boot in [entry[side]["boot"]] + entry[side].get("extra_boots", []))
    # The chief's training loop in the warm cells (on_train_begin -> on_train_end).
    s["floor_warm_loop"] = stats(loop for loops in _column(rounds, ("floor", "loops"))
                                 for loop in loops[1:])
    s["tfmw_warm_loop"] = stats(loop for loops in _column(rounds, ("tfmw", "warm", "all_loops"))
                                for loop in loops)
    # The floor's warm cells as a notebook would wait for them: until every worker finished.
    s["floor_warm_all"] = stats(cell for cells in _column(rounds, ("floor", "cells_all"))
                                for cell in cells[1:])
    s["trivial_ms"] = stats(ms for values in _column(rounds, ("tfmw", "trivial_ms"))
                            for ms in values)
    # start -> trained = start + cold cell, per round, on both sides (the floor's
    # processes go on to fit again, so their exit is no end point)
    s["floor_wall"] = stats([e["floor"]["boot"] + e["floor"]["cells"][0] for e in rounds
                             if _ok(e.get("floor")) and e["floor"].get("cells")])
    s["tfmw_wall"] = stats([e["tfmw"]["boot"] + e["tfmw"]["cold"]["seconds"] for e in rounds
                            if "boot" in e.get("tfmw", {}) and "cold" in e["tfmw"]])
    for name in ("off", "on"):   # steps/s of the chief's training loop (see SAMPLES)
        s[f"dashboard_{name}_steps_per_s"] = stats(
            steps / v for loops in _column(rounds, ("tfmw", "dashboard", name, "all_loops"))
            for v in loops)
        s[f"dashboard_{name}_stalled"] = stalled_share(rounds, name)
    s["ratios"] = {
        "boot": ratio(s["tfmw_boot"], s["floor_boot"]),
        "fit_cold": ratio(s["tfmw_cold_cell"], s["floor_cell"]),
        "fit_warm": ratio(s["tfmw_warm_cell"], s["floor_warm_cell"]),
        "model_fit_warm": ratio(s["tfmw_warm_fit"], s["floor_fit"]),
        "loop_warm": ratio(s["tfmw_warm_loop"], s["floor_warm_loop"]),
        "all_warm": ratio(s["tfmw_warm_cell"], s["floor_warm_all"]),
        "wall": ratio(s["tfmw_wall"], s["floor_wall"]),
        "tfmw_wall_vs_ray_first": ratio(s["tfmw_wall"], s["ray_first"]),
        "tfmw_warm_vs_ray_second": ratio(s["tfmw_warm_cell"], s["ray_second"]),
        "dashboard": ratio(s["dashboard_on_steps_per_s"], s["dashboard_off_steps_per_s"]),
        "dashboard_cell": ratio(s["dashboard_off_cell"], s["dashboard_on_cell"]),
        "default_cell": ratio(s["default_cell"], s["dashboard_off_cell"]),
        "in_place_cell": ratio(s["in_place_cell"], s["dashboard_off_cell"]),
        "threads_split_vs_default": ratio(s["threads_split_warm_fit"],
                                          s["threads_default_warm_fit"]),
    }
    s["goals"] = goals(s, rounds)
    # Figures judged like a goal's, with no goal: the cell as before, for comparison.
    s["figures"] = {key: judge(per_round(rounds, key), key, "<=", GOALS["default_cell"][1])
                    for key in ("in_place_cell",) if per_round(rounds, key)}
    return s


# Each goal's samples per round: (numerator's, denominator's). The cells of this job are
# bimodal on this machine (about 1.0 s or 1.6 s at random, the floor's as much as tfmw's:
# see docs/benchmarks.md), so a median flips with how many cells of a run landed slow. Each side is
# summarized by its fast mode instead, the 10th percentile of all its cells, and the
# interval comes from resampling whole rounds (paired: a slow spell hits both sides).
SAMPLES = {
    "boot": lambda e: ([e["tfmw"]["boot"]] + e["tfmw"].get("extra_boots", []),
                       [e["floor"]["boot"]] + e["floor"].get("extra_boots", [])),
    "fit_warm": lambda e: (e["tfmw"]["warm"]["all"], e["floor"]["cells"][1:]),
    # The steps alone: a tfmw cell waits for every worker, so it holds the post-fit stall
    # whenever *any* worker has it (with 2 workers about 3 cells in 4), while the floor's
    # cell is its chief's alone; the chief's training loops compare what runs the same.
    "loop_warm": lambda e: (e["tfmw"]["warm"]["all_loops"], e["floor"]["loops"][1:]),
    "all_warm": lambda e: (e["tfmw"]["warm"]["all"], e["floor"]["cells_all"][1:]),
    # steps/s on / off = training-loop time off / on. The loop (on_train_begin ->
    # on_train_end on the chief) holds every step and all the dashboard's work during
    # them (the workers' reporting, the notebook's drawing on the same cores); the cell
    # around it adds the post-fit stall that comes in about half the cells at random
    # (docs/benchmarks.md), 0.5 s on a 1 s cell, which no number of rounds here averages out.
    "dashboard": lambda e: (e["tfmw"]["dashboard"]["off"]["all_loops"],
                            e["tfmw"]["dashboard"]["on"]["all_loops"]),
    # What a cell costs as the magic runs it by default (dashboard + a checkpoint every
    # epoch) against the plain cell, alternated on one cluster; whole cells, since the
    # last checkpoint's write ends with the cell, after the training loop.
    "default_cell": lambda e: (e["tfmw"]["dashboard"]["default"]["all"],
                               e["tfmw"]["dashboard"]["off"]["all"]),
    "trivial_ms": lambda e: (e["tfmw"]["trivial_ms"], None),
    # --checkpoints-in-place: the same, saving on the training thread (no goal)
    "in_place_cell": lambda e: (e["tfmw"]["dashboard"]["in_place"]["all"],
                                e["tfmw"]["dashboard"]["off"]["all"]),
}
FAST_MODE = 0.10       # the percentile each side of a ratio is summarized by
# ... except where the samples have one mode: the training loops have no stall in them
# ... and where both sides are whole tfmw cells of one cluster, alike in their stalls (the
# default cell against the plain one: a post-fit stall is as likely on either side).
PERCENTILE = {"dashboard": 0.50, "loop_warm": 0.50, "default_cell": 0.50, "in_place_cell": 0.50,
              # experiments_*.py: the chief's training loops, and one sweep a side a round
              "record_loop": 0.50, "sweep_floor": 0.50}
CONFIDENCE = 0.90
RESAMPLES = 4000


# A cell that took this much longer than its training loop had the post-fit stall
# (measured: 0.08-0.10 s around the loop in a fast cell, 0.2-0.55 s in a stalled one).
STALL_SECONDS = 0.15


def stalled_share(rounds: list[dict], side: str) -> float | None:
    """The share of the dashboard's `side` ("off"/"on") cells with the post-fit stall."""
    pairs = []
    for entry in rounds:
        try:
            runs = entry["tfmw"]["dashboard"][side]
            pairs += list(zip(runs["all"], runs["all_loops"]))
        except (KeyError, TypeError):
            continue
    if not pairs:
        return None
    return sum(cell - loop > STALL_SECONDS for cell, loop in pairs) / len(pairs)


def per_round(rounds: list[dict], key: str) -> list[tuple]:
    pairs = []
    for entry in rounds:
        try:
            pairs.append(SAMPLES[key](entry))
        except (KeyError, TypeError, IndexError):
            pass   # a contender failed in that round
    return pairs


def percentile(values: list[float], fraction: float) -> float:
    values = sorted(values)
    at = fraction * (len(values) - 1)
    low = int(at)
    high = min(low + 1, len(values) - 1)
    return values[low] + (values[high] - values[low]) * (at - low)


def estimate(pairs: list[tuple], key: str) -> float:
    """The goal's figure: the trivial cell's median ms, else a ratio of fast modes (of
    medians for the goals in PERCENTILE)."""
    first = [v for a, _ in pairs for v in a]
    if key == "trivial_ms":
        return statistics.median(first)
    at = PERCENTILE.get(key, FAST_MODE)
    return percentile(first, at) / percentile([v for _, b in pairs for v in b], at)


def interval(pairs: list[tuple], key: str, confidence: float = CONFIDENCE,
             resamples: int = RESAMPLES, seed: int = 0) -> tuple[float, float] | None:
    """A bootstrap interval for `estimate`, resampling whole rounds (None below 3)."""
    if len(pairs) < 3:
        return None
    generator = random.Random(seed)
    values = sorted(estimate(generator.choices(pairs, k=len(pairs)), key)
                    for _ in range(resamples))
    tail = (1 - confidence) / 2
    return values[int(tail * resamples)], values[int((1 - tail) * resamples) - 1]


def judge(pairs: list[tuple], key: str, op: str, bound: float) -> dict:
    """A goal's figure (`estimate`), a bootstrap interval for it, and a verdict: met or
    missed when the whole interval is on one side of the bound, None (inconclusive)
    when it straddles the bound or there are too few rounds."""
    value = estimate(pairs, key) if pairs else None
    span = interval(pairs, key)
    met = None
    if span is not None:
        passes = [{"<=": v <= bound, ">=": v >= bound, "<": v < bound}[op] for v in span]
        met = passes[0] if passes[0] == passes[1] else None
    return {"value": value, "interval": span, "met": met, "n": len(pairs)}


def goals(s: dict, rounds: list[dict] | None = None) -> dict:
    """Each goal of GOALS judged on the rounds (see `judge`)."""
    return {key: {"goal": text, **judge(per_round(rounds or [], key), key, op, bound)}
            for key, (op, bound, text) in GOALS.items()}
