"""Where `TFCluster.start(2)` spends its time, next to the floor's boot, round by round.

    python benchmarks/boot_profile.py [--rounds 7]
    python benchmarks/boot_profile.py --timeline [--rounds 5] [--keras 2]

`--timeline`: one start's phases beside the floor's, through the first all-reduce, in
alternated rounds (tfmw_bench/start_timeline.py says which points each side stamps);
medians [min-max] per phase, and per round tfmw / floor for "ready" (the start's return
against the floor's last strategy made) and for the first collective.

Phases (seconds from the call): the controller up, the engine processes launched,
the client connected, every engine registered, then the workers made (TF_CONFIG
handshake, TensorFlow imported, strategy created). The floor is bench.py's: two
processes started with TF_CONFIG, until both printed "ready". Also the CPU seconds
each side burned until ready: on 2 cores, half of that is a floor under the wall time.
"""

from __future__ import annotations

import argparse
import atexit
import inspect
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from tfmw_bench.common import cleanup, job_cell, live_clusters, progress  # noqa: E402
from tfmw_bench.floor import run_floor  # noqa: E402
from tfmw_bench.start_timeline import (  # noqa: E402
    FLOOR_PHASES,
    TFMW_PHASES,
    floor_timeline,
    tfmw_timeline,
)

PHASES = ("controller", "engines launched", "client", "registered", "workers made")


def loadavg() -> str:
    """This machine's load, as `cat /proc/loadavg` prints it."""
    with open("/proc/loadavg") as f:
        return f.read().strip()


def descendants_cpu() -> dict[str, float]:
    """CPU seconds (user + system) of this process's live descendants, by kind: the
    controller, the engines, and the rest (launchers, the network keeper)."""
    import psutil

    totals = {"controller": 0.0, "engines": 0.0, "rest": 0.0}
    for child in psutil.Process().children(recursive=True):
        try:
            times, command = child.cpu_times(), " ".join(child.cmdline())
        except psutil.Error:
            continue
        kind = ("controller" if "controller" in command
                else "engines" if "engine" in command else "rest")
        totals[kind] += times.user + times.system
    return totals


def instrument(marks: dict):
    """Record when each phase of TFCluster.start ends, relative to marks['began']."""
    import ipyparallel as ipp
    import tfmw_notebook.cluster.tfcluster as cluster_module
    from tfmw_notebook.cluster.cells.worker_calls import WorkerCalls
    from tfmw_notebook.cluster.launch import engines

    def timed(owner, name, phase):
        original = getattr(owner, name)

        def mark():
            marks[phase] = time.perf_counter() - marks["began"]

        if inspect.iscoroutinefunction(original):
            async def wrapper(*args, **kwargs):
                result = await original(*args, **kwargs)
                mark()
                return result
        else:
            def wrapper(*args, **kwargs):
                result = original(*args, **kwargs)
                mark()
                return result

        setattr(owner, name, wrapper)

    # Cluster's *_sync methods run these coroutines.
    timed(ipp.Cluster, "start_controller", "controller")
    timed(ipp.Cluster, "start_engines", "engines launched")
    timed(ipp.Cluster, "connect_client", "client")
    timed(engines.EngineGroup, "_wait_for_new_engines", "registered")
    timed(WorkerCalls, "describe_engines", "handshake (TF_CONFIG)")
    bootstrap = WorkerCalls.bootstrap

    def bootstrap_seconds(self, ids, settings):   # each engine's own bootstrap, timed there
        infos = bootstrap(self, ids, settings)
        marks["(bootstrap, its length)"] = max(info.get("seconds", 0.0) for info in infos)
        return infos

    WorkerCalls.bootstrap = bootstrap_seconds
    timed(cluster_module, "make_workers", "workers made")


def timeline(workdir: str, rounds: int, keras: int) -> int:
    """Alternated rounds of the floor's timeline and tfmw's; the table of both."""
    marks: dict = {}
    instrument(marks)
    floors, ours = [], []
    try:
        for index in range(rounds):
            sides = [("floor", lambda: floor_timeline(workdir, keras)),
                     ("tfmw", lambda: tfmw_timeline(marks, keras))]
            for name, side in (sides if index % 2 == 0 else sides[::-1]):
                (floors if name == "floor" else ours).append(side())
            progress(f"round {index + 1}: floor ready {floors[-1]['strategy made']:.2f} s, "
                     f"collective {floors[-1]['first collective']:.2f} s; tfmw ready "
                     f"{ours[-1]['start returned']:.2f} s, collective "
                     f"{ours[-1]['first collective']:.2f} s; load {os.getloadavg()[0]:.2f}")
    finally:
        cleanup()
    if not ours:
        return 1
    print_timeline(floors, ours)
    return 0


def print_timeline(floors: list[dict], ours: list[dict]) -> None:
    def cell(values):
        values = [v for v in values if v is not None]
        return (f"{statistics.median(values):6.2f} [{min(values):.2f}-{max(values):.2f}]"
                if values else "")

    print(f"{'side':<6}{'phase ends at (s from the start)':<34}{'median [min-max]':>22}")
    for phase in FLOOR_PHASES:
        print(f"{'floor':<6}{phase:<34}{cell([r[phase] for r in floors]):>22}")
    for phase in TFMW_PHASES:
        print(f"{'tfmw':<6}{phase:<34}{cell([r[phase] for r in ours]):>22}")
    for ours_key, floor_key in (("start returned", "strategy made"),
                                ("first collective", "first collective")):
        ratios = [t[ours_key] / f[floor_key] for t, f in zip(ours, floors)]
        print(f"tfmw {ours_key} / floor {floor_key}, per round: median "
              f"{statistics.median(ratios):.2f}x [{min(ratios):.2f}-{max(ratios):.2f}]; "
              f"medians {statistics.median(t[ours_key] for t in ours):.2f} / "
              f"{statistics.median(f[floor_key] for f in floors):.2f} s")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--timeline", action="store_true",
                        help="the phases of one start beside the floor's, to the first all-reduce")
    parser.add_argument("--keras", type=int, choices=(2, 3), default=2,
                        help="with --timeline: the Keras of both sides (tfmw's default: 2)")
    args = parser.parse_args(argv)
    workdir = tempfile.mkdtemp(prefix="tfmw-boot-")
    atexit.register(shutil.rmtree, workdir, ignore_errors=True)
    os.environ["IPYTHONDIR"] = os.path.join(workdir, "ipython")
    if args.timeline:
        print(f"load at start: {loadavg()}", flush=True)
        code = timeline(workdir, args.rounds, args.keras)
        print(f"load at end: {loadavg()}", flush=True)
        return code
    cell_path = os.path.join(workdir, "job_cell.py")
    with open(cell_path, "w") as f:
        f.write(job_cell(1, 5))
    from tfmw_notebook import TFCluster

    marks: dict = {}
    instrument(marks)
    floors, floor_cpu, rounds = [], [], []
    try:
        for index in range(args.rounds):
            floor = run_floor(workdir, cell_path)
            floors.append(floor["boot"])
            marks.clear()
            marks["began"], cpu_began = time.perf_counter(), time.process_time()
            cluster = TFCluster.start(2, gpus_per_worker=0)   # the floor hides GPUs
            live_clusters.append(cluster)
            total = time.perf_counter() - marks["began"]
            cpu = {f"{kind} cpu": seconds for kind, seconds in descendants_cpu().items()}
            cpu["notebook cpu"] = time.process_time() - cpu_began
            cpu["others cpu"] = sum(cpu[f"{k} cpu"] for k in ("controller", "engines", "rest"))
            floor_cpu.append(floor["boot_cpu"])
            rounds.append({**{p: marks.get(p) for p in PHASES}, "total": total, **cpu})
            cluster.stop()
            live_clusters.remove(cluster)
            progress(f"round {index + 1}: floor {floors[-1]:.2f} s, tfmw {total:.2f} s ("
                     + ", ".join(f"{p} {marks.get(p, float('nan')):.2f}" for p in PHASES)
                     + f"); CPU s: floor {floor_cpu[-1]:.1f}, tfmw {cpu['notebook cpu']:.1f} "
                     f"here + {cpu['others cpu']:.1f} in the controller and engines; "
                     f"load {os.getloadavg()[0]:.2f}")
    finally:
        cleanup()
    if not rounds:
        return 1
    print(f"{'phase ends at (s)':<24}{'median':>8}{'min':>8}{'max':>8}")
    for phase in (*PHASES, "total"):
        values = [r[phase] for r in rounds if r[phase] is not None]
        print(f"{phase:<24}{statistics.median(values):>8.2f}{min(values):>8.2f}"
              f"{max(values):>8.2f}")
    print(f"{'floor boot':<24}{statistics.median(floors):>8.2f}{min(floors):>8.2f}"
          f"{max(floors):>8.2f}")
    print(f"{'CPU seconds to ready':<24}{'median':>8}{'min':>8}{'max':>8}")
    for name, values in (("floor (2 processes)", floor_cpu),
                         ("tfmw: this process", [r["notebook cpu"] for r in rounds]),
                         ("tfmw: controller", [r["controller cpu"] for r in rounds]),
                         ("tfmw: 2 engines", [r["engines cpu"] for r in rounds]),
                         ("tfmw: other processes", [r["rest cpu"] for r in rounds]),
                         ("tfmw: total", [r["notebook cpu"] + r["others cpu"]
                                          for r in rounds])):
        print(f"{name:<24}{statistics.median(values):>8.2f}{min(values):>8.2f}"
              f"{max(values):>8.2f}")
    ratios = [r["total"] / f for r, f in zip(rounds, floors)]
    print(f"tfmw / floor per round: median {statistics.median(ratios):.2f}x "
          f"[{min(ratios):.2f}-{max(ratios):.2f}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
