"""What a restart costs with and without warm standby, side by side in one run.

    python benchmarks/elastic.py [--workers 2] [--standby K] [--rounds 5] [--keras 3|2]
    python benchmarks/elastic.py --resize [--rounds 3]

Two clusters of N workers live through the whole run: one started plainly, one with
`standby=K` (K spare engines, TensorFlow imported; K = N by default). Each round restarts
both, in turn, through `cluster.restart()`, the same replacement a worker's death
triggers, and takes the time it reports (`last_restart_seconds`: the "restarted in X s" of
the cell). Before every timed restart the benchmark waits until the spares have registered
and finished importing TensorFlow (a refill imports it in N processes at once, which would
slow whatever runs beside it): so it measures a restart that finds its spares ready.
Prints the medians [min-max], the ratios per round (warm / cold restart, warm restart /
cold start of the same cluster; goal <= 0.3x), and an idle spare's memory.

`--resize`: a cluster of 2 trains a small model (3 epochs), then each round resizes it
2 -> 4 -> 2; each resize is timed whole (as the magic's line reports it: the restart of
the new size, then the replay that gives the new workers the model's state), beside a
cold start of 4 workers and the fit it would take to train that model again.
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


_JOB = """
import numpy as np
x = np.random.RandomState(0).rand(2048, 32).astype("float32")
y = (x.sum(axis=1) > 16).astype("float32")
data = tf.data.Dataset.from_tensor_slices((x, y)).batch(64).repeat()
model = tf.keras.Sequential([tf.keras.layers.Dense(64, activation="relu"),
                             tf.keras.layers.Dense(1)])
model.compile(optimizer="adam", loss="mse")
"""
_FIT = "model.fit(data, epochs=3, steps_per_epoch=30, verbose=0)"


def _trained(cluster: TFCluster) -> float:
    """Define the job on `cluster` and fit it; the fit's seconds."""
    cluster.run(_JOB)
    began = time.perf_counter()
    cluster.run(_FIT)
    return time.perf_counter() - began


def resize_rounds(rounds: int, keras: int) -> None:
    """Resize 2 -> 4 -> 2 after a fit; beside it, a cold start of 4 and the fit again."""
    cluster = TFCluster.start(2, keras=keras)
    try:
        fit_seconds = _trained(cluster)
        times: dict[int, list[float]] = {4: [], 2: []}
        replays: dict[int, list[float]] = {4: [], 2: []}
        for round_ in range(rounds):
            for n in (4, 2):
                _quiet()
                began = time.perf_counter()
                report = cluster.resize(n)
                times[n].append(time.perf_counter() - began)
                replays[n].append(report.seconds if report is not None else 0.0)
                assert report is not None and report.fits_restored == 1, report
            print(f"round {round_ + 1}: 2 -> 4 {times[4][-1]:.2f} s, 4 -> 2 {times[2][-1]:.2f} s",
                  flush=True)
    finally:
        cluster.stop()
    _quiet()
    cold = TFCluster.start(4, keras=keras)
    try:
        refit, start_4 = _trained(cold), cold.started_seconds
    finally:
        cold.stop()
    print(f"\nresize 2 -> 4          {_span(times[4])} s (its replay {_span(replays[4])} s)")
    print(f"resize 4 -> 2          {_span(times[2])} s (its replay {_span(replays[2])} s)")
    print(f"cold start of 4        {start_4:6.2f} s, and the fit trained again on 4: "
          f"{refit:.2f} s (on 2: {fit_seconds:.2f} s)")
    print(f"resize 2 -> 4 / (start 4 + fit again): "
          f"{statistics.median(times[4]) / (start_4 + refit):.2f}x")


def _span(values: list[float]) -> str:
    return f"{statistics.median(values):6.2f} [{min(values):.2f}-{max(values):.2f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--standby", type=int, default=None, help="spares (default: workers)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--keras", type=int, choices=(3, 2), default=DEFAULT_KERAS)
    parser.add_argument("--resize", action="store_true", help="time resizes 2 -> 4 -> 2")
    args = parser.parse_args()
    if args.resize:
        resize_rounds(args.rounds, args.keras)
        return
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
