"""What the fork server saves: `TFCluster.start(N)` then one cell, and `restart()` then one
cell, with engines forked from it and with each engine importing TensorFlow itself.

    python benchmarks/fork_server.py [--rounds 5] [--workers 2] [--restarts 2]

Each round starts a cluster both ways (the order alternates between rounds), times the
start and `--restarts` restarts (each followed by a trivial cell, so the workers are
ready), and stops it. The CPU seconds are those of every process the start or restart
ran (the notebook's children, ended or not: the fork server counts against the forked
side). Prints the medians side by side and their ratios.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time
from collections.abc import Callable

import psutil
from tfmw_notebook import TFCluster
from tfmw_notebook.cluster.launch import engines


def cpu_seconds() -> float:
    """CPU time of this process's descendants: those living, and those their parents
    reaped (a forked engine is the fork server's child)."""
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    living = 0.0
    for child in psutil.Process().children(recursive=True):
        try:
            times = child.cpu_times()
            living += times.user + times.system + times.children_user + times.children_system
        except psutil.NoSuchProcess:
            pass
    return reaped.ru_utime + reaped.ru_stime + living


def measured(action: Callable[[], object]) -> tuple[float, float]:
    """(wall s, CPU s of the children) of `action`."""
    cpu, wall = cpu_seconds(), time.perf_counter()
    action()
    return time.perf_counter() - wall, cpu_seconds() - cpu


def one_round(forked: bool, workers: int, restarts: int,
              times: dict[str, list[float]]) -> None:
    side = "forked" if forked else "own import"
    original = engines._fork_server
    if not forked:
        engines._fork_server = lambda *args: None   # type: ignore[assignment]
    try:
        holder: list[TFCluster] = []
        wall, cpu = measured(lambda: (holder.append(TFCluster.start(workers)),
                                      holder[0].run("x = 1")))
        times[f"{side} start wall"].append(wall)
        times[f"{side} start cpu"].append(cpu)
        cluster = holder[0]
        try:
            for _ in range(restarts):
                wall, cpu = measured(lambda: (cluster.restart(), cluster.run("x = 1")))
                times[f"{side} restart wall"].append(wall)
                times[f"{side} restart cpu"].append(cpu)
        finally:
            cluster.stop()
    finally:
        engines._fork_server = original   # type: ignore[assignment]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--restarts", type=int, default=2)
    args = parser.parse_args()
    times: dict[str, list[float]] = {}
    for name in ("start wall", "start cpu", "restart wall", "restart cpu"):
        for side in ("forked", "own import"):
            times[f"{side} {name}"] = []
    for round_ in range(args.rounds):
        for forked in (True, False) if round_ % 2 == 0 else (False, True):
            one_round(forked, args.workers, args.restarts, times)
    print(f"{args.workers} workers, {args.rounds} rounds, {args.restarts} restarts each; "
          "medians in seconds [all values]")
    print(f"{'':<14}{'forked':>10}{'own import':>12}{'ratio':>8}")
    for name in ("start wall", "start cpu", "restart wall", "restart cpu"):
        forked, own = (statistics.median(times[f"{side} {name}"])
                       for side in ("forked", "own import"))
        print(f"{name:<14}{forked:>10.2f}{own:>12.2f}{forked / own:>7.2f}x")
    for name, values in times.items():
        print(f"  {name}: [{', '.join(f'{v:.2f}' for v in values)}]")


if __name__ == "__main__":
    main()
