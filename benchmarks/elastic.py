"""What a restart costs with and without warm standby, side by side in one run.

    python benchmarks/elastic.py [--workers 2] [--standby K] [--rounds 5] [--keras 3|2]

Two clusters of N workers live through the whole run: one started plainly, one with
`standby=K` (K spare engines, TensorFlow imported; K = N by default). Each round restarts
both, in turn, through `cluster.restart()`, the same replacement a worker's death
triggers, and takes the time it reports (`last_restart_seconds`: the "restarted in X s" of
the cell). Before every timed restart the benchmark waits until the spares have registered
and finished importing TensorFlow (a refill imports it in N processes at once, which would
slow whatever runs beside it): so it measures a restart that finds its spares ready.
Prints the medians [min-max], the ratios per round (warm / cold restart, warm restart /
cold start of the same cluster; goal <= 0.3x), and an idle spare's memory.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import psutil
from tfmw_notebook import TFCluster
from tfmw_notebook.cluster.tfcluster import DEFAULT_KERAS

_READY_SECONDS = 180.0


def _spare_ids(cluster: TFCluster) -> list[int]:
    group = cluster._group
    if group.standby is None:
        return []
    return group.standby.spares(group.registered(), group._taken())


def _preimported() -> tuple[int, bool]:
    """On a spare: its pid and whether its TensorFlow import has ended."""
    import os
    import sys
    import threading

    importing = any(t.name == "tfmw-preimport" for t in threading.enumerate())
    return os.getpid(), "tensorflow" in sys.modules and not importing


def wait_for_spares(cluster: TFCluster, n: int) -> list[int]:
    """The pids of `n` spares once each has TensorFlow imported."""
    deadline = time.monotonic() + _READY_SECONDS
    while time.monotonic() < deadline:
        ids = _spare_ids(cluster)
        if len(ids) >= n:
            states = cluster._group.client[ids].apply_sync(_preimported)
            if all(ready for _, ready in states):
                return [pid for pid, _ in states]
        time.sleep(0.5)
    raise TimeoutError(f"{n} spares were not ready within {_READY_SECONDS:g} s")


def _quiet() -> None:
    """Let the load of what ran before (a refill, a restart's kills) settle."""
    time.sleep(2.0)


def _span(values: list[float]) -> str:
    return f"{statistics.median(values):6.2f} [{min(values):.2f}-{max(values):.2f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--standby", type=int, default=None, help="spares (default: workers)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--keras", type=int, choices=(3, 2), default=DEFAULT_KERAS)
    args = parser.parse_args()
    n = args.workers
    k = n if args.standby is None else args.standby
    print(f"load average before: {os.getloadavg()[0]:.2f}; {n} workers, {k} spares, "
          f"{args.rounds} rounds")
    cold = TFCluster.start(n, keras=args.keras)
    warm = None
    try:
        warm = TFCluster.start(n, keras=args.keras, standby=k)
        starts = {"plain": cold.started_seconds, "standby": warm.started_seconds}
        spare_pids = wait_for_spares(warm, k)
        spare_mb = [psutil.Process(pid).memory_full_info().uss / 2**20 for pid in spare_pids]
        times: dict[str, list[float]] = {"cold": [], "warm": []}
        for round_ in range(args.rounds):
            for name, cluster in (("cold", cold), ("warm", warm)):
                wait_for_spares(warm, k)
                _quiet()
                cluster.restart()
                if name == "warm":
                    taken = {w.pid for w in warm.workers}
                    spares = set(spare_pids)
                    assert taken <= spares if k >= n else spares <= taken, \
                        "the restart did not take the spares"
                    spare_pids = wait_for_spares(warm, k)
                times[name].append(cluster.last_restart_seconds)
            print(f"round {round_ + 1}: cold restart {times['cold'][-1]:.2f} s, "
                  f"warm restart {times['warm'][-1]:.2f} s, "
                  f"load {os.getloadavg()[0]:.2f}", flush=True)
        pairs = [w / c for w, c in zip(times["warm"], times["cold"])]
        of_start = [w / starts["standby"] for w in times["warm"]]
        print(f"\ncold start (s)        plain {starts['plain']:.2f}, with standby "
              f"{starts['standby']:.2f}")
        print(f"restart, no standby   {_span(times['cold'])} s")
        print(f"restart, standby {k}    {_span(times['warm'])} s")
        print(f"warm / cold restart   {_span(pairs)}x (per round)")
        print(f"warm restart / start  {_span(of_start)}x (goal <= 0.3x)")
        print(f"an idle spare holds   {statistics.median(spare_mb):.0f} MiB of its own (USS)")
        print(f"load average after: {os.getloadavg()[0]:.2f}")
    finally:
        cold.stop()
        if warm is not None:
            warm.stop()


if __name__ == "__main__":
    main()
