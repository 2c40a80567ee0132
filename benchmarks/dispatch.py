"""The notebook-to-engines round trip that ipyparallel itself allows, before tfmw adds
anything: one no-op call on N plain engines (no TensorFlow), sent three ways, side by side
in one run; with `--tfmw`, on the engines of a TFCluster, next to tfmw's trivial cell.

    python benchmarks/dispatch.py [--sizes 16 64] [--calls 40] [--rounds 3] [--tfmw]

- direct: one `apply_async` per engine (N requests, N replies);
- broadcast: one request to the controller's broadcast scheduler, one reply per engine
  (how tfmw sends a cell);
- coalescing: one request, one reply gathered by the scheduler (plain engines only: on
  tfmw's controller, whose schedulers are threads of one process, ipyparallel's broadcast
  schedulers share their table of pending replies and a coalesced call never returns);
- tfmw cell (`--tfmw`): `cluster.run("x = 1")`, the whole trivial cell as a notebook runs it.

For each: the median round trip and the notebook's CPU per call (its process time), with
ratios against direct, and the CPU per call of the processes the notebook started (the
controller and the engines). Where N engines share few cores, the engines' own turns bound the
round trip whatever the notebook sends: compare wall and notebook CPU.
"""

from __future__ import annotations

import argparse
import statistics
import time

import ipyparallel as ipp
import psutil


def noop(source, filename, display):
    """Stands in for a cell's entry point: the same argument shapes, no work."""
    return None


def measure(send, calls: int) -> tuple[list[float], float, float]:
    """Round trips (ms) of `calls` sends; the notebook's CPU ms per send, and the CPU ms
    per send of the processes it started (controller and engines)."""
    cluster = psutil.Process().children(recursive=True)
    walls = []
    cpu_began, cluster_began = time.process_time(), _cpu_seconds(cluster)
    for _ in range(calls):
        began = time.perf_counter()
        send()
        walls.append((time.perf_counter() - began) * 1000)
    return (walls, (time.process_time() - cpu_began) * 1000 / calls,
            (_cpu_seconds(cluster) - cluster_began) * 1000 / calls)


def _cpu_seconds(processes) -> float:
    total = 0.0
    for process in processes:
        try:
            times = process.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system
    return total


def run_size(n: int, calls: int, rounds: int, tfmw: bool) -> dict[str, tuple]:
    if not tfmw:
        # Engines start at about 1.5 a second on 2 cores: the wait grows with N.
        with ipp.Cluster(n=n, log_level=40, engine_timeout=60 + 2 * n) as client:
            return compare(client, client.ids, {}, calls, rounds)
    from tfmw_notebook import TFCluster

    cluster = TFCluster.start(n, timeout=120 + 10 * n, gpus_per_worker=0)
    try:
        cell = {"tfmw cell": lambda: cluster.run("x = 1", want_display=False, timeout=60)}
        return compare(cluster._group.client, [w.engine_id for w in cluster.workers], cell,
                       calls, rounds)
    finally:
        cluster.stop()


def compare(client, ids: list[int], extra: dict, calls: int, rounds: int) -> dict:
    source = "x = 1\n"
    broadcast = client.broadcast_view(targets=ids, is_coalescing=False)
    coalescing = client.broadcast_view(targets=ids, is_coalescing=True)

    def direct():
        futures = [client[i].apply_async(noop, source, "cell", True) for i in ids]
        for future in futures:
            future.get(timeout=60)

    ways = {"direct": direct,
            "broadcast": lambda: broadcast.apply_async(noop, source, "cell",
                                                       True).get(timeout=60)}
    if not extra:
        ways["coalescing"] = lambda: coalescing.apply_async(noop, source, "cell",
                                                            True).get(timeout=60)
    ways.update(extra)
    for send in ways.values():      # warm every path before timing any
        measure(send, 5)
    walls: dict[str, list[float]] = {name: [] for name in ways}
    cpus: dict[str, list[float]] = {name: [] for name in ways}
    others: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(rounds):         # interleaved, so a slow spell hits all of them
        for name, send in ways.items():
            wall, cpu, other = measure(send, calls)
            walls[name] += wall
            cpus[name].append(cpu)
            others[name].append(other)
    return {name: (statistics.median(walls[name]), statistics.median(cpus[name]),
                   statistics.median(others[name])) for name in ways}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tfmw", action="store_true",
                        help="on a TFCluster's engines, with tfmw's trivial cell")
    args = parser.parse_args()
    print(f"{'N':>4} {'way':<11} {'round trip':>11} {'vs direct':>9} "
          f"{'notebook CPU':>13} {'vs direct':>9} {'cluster CPU':>12}")
    for n in args.sizes:
        results = run_size(n, args.calls, args.rounds, args.tfmw)
        base_wall, base_cpu, _ = results["direct"]
        for name, (wall, cpu, other) in results.items():
            print(f"{n:>4} {name:<11} {wall:>8.1f} ms {wall / base_wall:>8.2f}x "
                  f"{cpu:>10.1f} ms {cpu / base_cpu:>8.2f}x {other:>9.1f} ms", flush=True)


if __name__ == "__main__":
    main()
