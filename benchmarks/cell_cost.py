"""A trivial cell's own cost: `%%tfdist` with `pass` against ipyparallel's bare broadcast
no-op on as many plain engines, side by side in one run, for N = 2, 4, 8, 12.

    python benchmarks/cell_cost.py [--sizes 2 4 8 12] [--rounds 7] [--cells 20]
    python benchmarks/cell_cost.py --sizes 12 --profile 200   # where the notebook's time goes

For each N, two clusters live at once: `%tfdist start -n N` in an in-process IPython
shell (terminal, no kernel), and `ipyparallel.Cluster(n=N)` with its defaults. Each round
runs `--cells` trivial cells through the real magic (`%%tfdist` with no flags: the
defaults a notebook gets) and `--cells` calls of
`client.broadcast_view().apply_sync(lambda: None)` on the plain engines, and the same no-op
broadcast on tfmw's own engines ("tfmw engines, bare": what its controller and engines
allow before tfmw's cell adds anything); the order of the three turns with each round.
Printed per N: each side's median round trip (all cells) with [min-max] of the rounds'
medians, the ratio of the medians with a 90% bootstrap interval over rounds, and the
notebook process's CPU per call (`time.process_time()`, every thread of this process), the
share of its main thread (`time.thread_time()`: the magic and the send; the client's I/O
thread, which takes the replies in, is the rest), and the CPU per call of the processes
each side started (controller, schedulers, engines).
`--profile K` runs K trivial cells under cProfile at each N instead and prints the
notebook's top functions by their own and cumulative CPU time of the main thread (the
client's I/O thread is not in it).
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import cProfile
import io
import os
import pstats
import random
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from tfmw_bench.common import cleanup, live_clusters, progress  # noqa: E402

TRIVIAL = "pass\n"
CALL_TIMEOUT = 60.0
GOAL_RATIO = 1.3            # the trivial cell / the bare broadcast, at every N
GOAL_CPU_MS = 5.0           # the notebook's CPU per trivial cell at N = 12
SIDES = ("tfmw cell", "bare broadcast", "tfmw engines, bare")


def loadavg() -> str:
    """This machine's load, as `cat /proc/loadavg` prints it."""
    with open("/proc/loadavg") as f:
        return f.read().strip()


def noop():
    return None


def cpu_seconds(processes) -> float:
    """User + system CPU seconds of `processes` (psutil.Process), those still alive."""
    import psutil

    total = 0.0
    for process in processes:
        with contextlib.suppress(psutil.Error):
            times = process.cpu_times()
            total += times.user + times.system
    return total


def descendants() -> dict[int, object]:
    import psutil

    return {p.pid: p for p in psutil.Process().children(recursive=True)}


class Shell:
    """The real magic in an in-process IPython shell, its output swallowed."""

    def __init__(self):
        from IPython.core.interactiveshell import InteractiveShell

        self.shell = InteractiveShell.instance()
        self.shell.run_line_magic("load_ext", "tfmw_notebook")

    def start(self, n: int):
        from tfmw_notebook.magics.session import active_cluster

        with contextlib.redirect_stdout(io.StringIO()):
            self.shell.run_line_magic("tfdist", f"start -n {n} --gpus-per-worker 0")
        cluster = active_cluster()
        if cluster is None:
            raise RuntimeError(f"%tfdist start -n {n} made no cluster")
        live_clusters.append(cluster)
        return cluster

    def cell(self) -> None:
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            self.shell.run_cell_magic("tfdist", "", TRIVIAL)
        if out.getvalue().strip():
            raise RuntimeError(f"the trivial cell printed: {out.getvalue()[:300]!r}")

    def stop(self, cluster) -> None:
        with contextlib.redirect_stdout(io.StringIO()):
            self.shell.run_line_magic("tfdist", "stop")
        if cluster in live_clusters:
            live_clusters.remove(cluster)


def timed(send, calls: int, processes) -> dict:
    """`calls` sends: each one's round trip (ms), and per send the notebook's CPU (ms)
    and that of `processes` (ms)."""
    walls = []
    cpu_began, others_began = time.process_time(), cpu_seconds(processes)
    main_began = time.thread_time()
    for _ in range(calls):
        began = time.perf_counter()
        send()
        walls.append((time.perf_counter() - began) * 1000)
    return {"walls": walls, "cpu": (time.process_time() - cpu_began) * 1000 / calls,
            "main": (time.thread_time() - main_began) * 1000 / calls,
            "others": (cpu_seconds(processes) - others_began) * 1000 / calls}


def bootstrap_ratio(rounds: list[dict], a: str, b: str, resamples: int = 4000,
                    seed: int = 0) -> tuple[float, float] | None:
    """A 90% interval of median(a's cells) / median(b's cells), resampling whole rounds."""
    if len(rounds) < 3:
        return None
    generator = random.Random(seed)
    values = []
    for _ in range(resamples):
        picked = generator.choices(rounds, k=len(rounds))
        values.append(statistics.median(v for r in picked for v in r[a]["walls"])
                      / statistics.median(v for r in picked for v in r[b]["walls"]))
    values.sort()
    return values[int(0.05 * resamples)], values[int(0.95 * resamples) - 1]


def measure_size(shell: Shell, n: int, rounds: int, cells: int) -> list[dict]:
    """Both clusters up, `rounds` alternated rounds; both stopped whatever happens."""
    import ipyparallel as ipp

    before = set(descendants())
    with ipp.Cluster(n=n, log_level=40, engine_timeout=60 + 2 * n) as client:
        client.wait_for_engines(n, timeout=60 + 2 * n)
        plain_pids = set(descendants()) - before
        cluster = shell.start(n)
        try:
            every = descendants()
            plain = [every[p] for p in plain_pids if p in every]
            ours = [p for pid, p in every.items() if pid not in plain_pids and pid not in before]
            ours_view = cluster._group.client.broadcast_view(
                targets=[w.engine_id for w in cluster.workers])
            plain_view = client.broadcast_view()
            sends = {
                "tfmw cell": (shell.cell, ours),
                "bare broadcast": (lambda: plain_view.apply_sync(noop), plain),
                "tfmw engines, bare": (lambda: ours_view.apply_async(noop).get(CALL_TIMEOUT),
                                       ours),
            }
            return alternated(sends, rounds, cells, n)
        finally:
            shell.stop(cluster)


def alternated(sends: dict, rounds: int, cells: int, n: int) -> list[dict]:
    for send, processes in sends.values():      # warm every path before timing any
        timed(send, 5, processes)
    results = []
    names = list(sends)
    for index in range(rounds):
        order = names[index % len(names):] + names[:index % len(names)]
        entry = {}
        for name in order:
            send, processes = sends[name]
            entry[name] = timed(send, cells, processes)
        results.append(entry)
        progress(f"N = {n}, round {index + 1}: " + ", ".join(
            f"{name} {statistics.median(entry[name]['walls']):.1f} ms "
            f"(CPU {entry[name]['cpu']:.1f} ms)" for name in names)
            + f"; load {loadavg().split()[0]}")
    return results


def summary_lines(n: int, rounds: list[dict]) -> list[str]:
    lines = []
    for name in SIDES:
        medians = [statistics.median(r[name]["walls"]) for r in rounds]
        pooled = statistics.median(v for r in rounds for v in r[name]["walls"])
        cpu = statistics.median(r[name]["cpu"] for r in rounds)
        main = statistics.median(r[name]["main"] for r in rounds)
        others = statistics.median(r[name]["others"] for r in rounds)
        lines.append(f"{n:>3}  {name:<20}{pooled:>8.1f} [{min(medians):.1f}-{max(medians):.1f}]"
                     f"{cpu:>14.2f}{main:>13.2f}{others:>16.1f}")
    ratio = (statistics.median(v for r in rounds for v in r["tfmw cell"]["walls"])
             / statistics.median(v for r in rounds for v in r["bare broadcast"]["walls"]))
    span = bootstrap_ratio(rounds, "tfmw cell", "bare broadcast")
    verdict = ("inconclusive" if span is None or span[0] <= GOAL_RATIO < span[1]
               else "ok" if span[1] <= GOAL_RATIO else "MISSED")
    span_text = f", 90% {span[0]:.2f}-{span[1]:.2f}" if span else ""
    lines.append(f"{n:>3}  tfmw cell / bare broadcast {ratio:.2f}x{span_text}: "
                 f"<= {GOAL_RATIO}x {verdict}")
    if n == 12:
        cpu = statistics.median(r["tfmw cell"]["cpu"] for r in rounds)
        lines.append(f"{n:>3}  notebook CPU per trivial cell {cpu:.2f} ms: <= {GOAL_CPU_MS} ms "
                     f"{'ok' if cpu <= GOAL_CPU_MS else 'MISSED'} (median of rounds)")
    return lines


def profile_size(shell: Shell, n: int, cells: int) -> None:
    cluster = shell.start(n)
    try:
        for _ in range(5):
            shell.cell()
        profiler = cProfile.Profile(time.thread_time)   # the main thread's CPU, not waits
        cpu_began, began = time.process_time(), time.perf_counter()
        profiler.enable()
        for _ in range(cells):
            shell.cell()
        profiler.disable()
        print(f"N = {n}: {cells} trivial cells, {(time.perf_counter() - began) * 1000 / cells:.1f}"
              f" ms each, notebook CPU {(time.process_time() - cpu_began) * 1000 / cells:.2f} ms "
              "each (under cProfile)")
        stats = pstats.Stats(profiler).strip_dirs()
        stats.sort_stats("tottime").print_stats(25)
        stats.sort_stats("cumulative").print_stats(45)
    finally:
        shell.stop(cluster)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[2, 4, 8, 12])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--cells", type=int, default=20, help="calls per side per round")
    parser.add_argument("--profile", type=int, default=0, metavar="K",
                        help="profile K trivial cells at each N instead")
    args = parser.parse_args(argv)
    workdir = tempfile.mkdtemp(prefix="tfmw-cellcost-")
    atexit.register(shutil.rmtree, workdir, ignore_errors=True)
    os.environ["IPYTHONDIR"] = os.path.join(workdir, "ipython")
    os.chdir(workdir)     # run records of the cells (none: no fit) stay out of the repository
    print(f"load at start: {loadavg()}", flush=True)
    shell, lines = Shell(), []
    try:
        for n in args.sizes:
            if args.profile:
                profile_size(shell, n, args.profile)
                continue
            lines += summary_lines(n, measure_size(shell, n, args.rounds, args.cells))
    finally:
        cleanup()
    if lines:
        print(f"{'N':>3}  {'side':<20}{'median ms [rounds]':>22}{'notebook CPU ms':>16}"
              f"{'main thread':>13}{'cluster CPU ms':>16}")
        print("\n".join(lines))
    print(f"load at end: {loadavg()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
