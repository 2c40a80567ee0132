"""The notebook's side of a big cluster, without TensorFlow: stub workers at N = 8, 32, 128.

    python benchmarks/control_plane.py [--workers 8 32 128] [--calls 30] [--seconds 10]
                                       [--steps-per-second 100]

Stub workers are real ipyparallel engines, launched as `%tfdist start` launches them (but
without TensorFlow's environment, so nothing imports it) and made workers by the handshake
alone (`describe_engine`, which needs no TensorFlow). They run tfmw's cells (outside a
strategy's scope) with the heartbeats every cell has, and a "training" cell publishes what
a Keras fit does through the worker's own EventPublisher (train_begin, a batch event
whenever one is due, an epoch event a second, train_end) at --steps-per-second. The
notebook takes them in as the magic does: the cell watch and the dashboard (LiveRun, widgets
on, so matplotlib draws; above 8 workers one line per host, as the magic's).

Per N, measured in this one process (the notebook's side):
- trivial: the round trip of `cluster.run("x = 1")`, median of --calls;
- events/s: the events the notebook took per second of the training cell, and the share of
  one core this process used meanwhile (its process time / the cell's wall time: client
  thread, watch and dashboard together); the same cell again with the events only counted,
  not drawn (what the client and the watch cost alone);
- death named: one stub worker SIGKILLed 2 s into a cell that sleeps; seconds from the kill
  until the cell ended with a failure naming that worker (one attempt, no restart).

Goals (issue "Scale", at 128 workers): trivial < 30 ms; notebook CPU on events < 10% of a
core; a dead worker named in < 5 s. On few cores the N engine processes compete with the
notebook for CPU: the numbers say what this machine allows, compare them within a run.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import signal
import statistics
import threading
import time

from tfmw_notebook import TFCluster
from tfmw_notebook.cluster.cells.run_settings import RunSettings
from tfmw_notebook.cluster.launch.engines import EngineGroup
from tfmw_notebook.cluster.worker_setup import engine_report
from tfmw_notebook.errors import WorkerFailed
from tfmw_notebook.magics.cells import host_of_rank
from tfmw_notebook.protocol.events import EventReader
from tfmw_notebook.protocol.run_options import CellOptions, FitState
from tfmw_notebook.widgets.live import LiveRun

# A Keras fit's events, as the worker's callback sends them: a batch event only when the
# publisher says one is due (at most every 0.25 s), an epoch event each second.
STUB_FIT = """
import time as _time
from ipyparallel.datapub import publish_data as _publish
from tfmw_notebook.worker.liveness.reporting import EventPublisher as _Publisher
_events = _Publisher(_publish, stub_rank)
_steps, _epochs = {steps_per_second}, {seconds}
_events.emit("train_begin", epochs=_epochs, steps=_steps, mode="fit")
_began = _time.monotonic()
for _epoch in range(_epochs):
    while True:
        _done = int((_time.monotonic() - _began) * _steps) - _epoch * _steps
        if _done >= _steps:
            break
        if _events.batch_due():
            _events.emit("batch", epoch=_epoch, step=_done,
                         logs={{"loss": 1.0 / (1 + _epoch * _steps + _done)}})
        _time.sleep(0.05)
    _events.emit("epoch", epoch=_epoch, logs={{"loss": 1.0 / (1 + _epoch)}}, steps=_steps)
_events.emit("train_end", logs={{}})
_events.flush()
"""


def stub_cluster(n: int, timeout: float) -> TFCluster:
    """N engines made workers by the handshake alone (no TensorFlow anywhere)."""
    group = EngineGroup.start(n, timeout=timeout)
    cluster = TFCluster(group, gpus_per_worker=0, timeout=timeout)
    replies = cluster.calls.describe_engines(group.ids, group.controller_address()[0],
                                             None, None, 0)
    cluster.workers = [engine_report(eid, reply) for eid, reply in zip(group.ids, replies)]
    for rank, worker in enumerate(cluster.workers):
        group.client[worker.engine_id].push({"stub_rank": rank}, block=True)
    return cluster


def _settings(**kwargs) -> RunSettings:
    # Outside a strategy's scope (there is none), nothing sent for Keras, no replay.
    return RunSettings(options=CellOptions(report=False), scope=False, record=False,
                       want_display=False, **kwargs)


def trivial(cluster: TFCluster, calls: int) -> float:
    settings = _settings(timeout=60)
    for _ in range(3):
        cluster.run("x = 1", settings=settings)
    walls = []
    for _ in range(calls):
        began = time.perf_counter()
        cluster.run("x = 1", settings=settings)
        walls.append((time.perf_counter() - began) * 1000)
    return statistics.median(walls)


def events(cluster: TFCluster, seconds: int, steps_per_second: int,
           dashboard: bool = True) -> tuple[float, float]:
    """(events the notebook took per second, share of a core this process used); without
    `dashboard`, the events are only counted (what the watch and the client cost alone)."""
    live = LiveRun(widgets=True, host_of=lambda rank: host_of_rank(cluster, rank))
    readers: dict[int, EventReader] = {}
    counted = [0]

    def on_data(rank: int, data: dict) -> None:
        if dashboard:
            live.on_data(rank, data)
        counted[0] += len(readers.setdefault(rank, EventReader()).read(data))

    source = STUB_FIT.format(steps_per_second=steps_per_second, seconds=seconds)
    wall, cpu = time.perf_counter(), time.process_time()
    # Outside a kernel, display() would print the dashboard's widget tree.
    with contextlib.redirect_stdout(io.StringIO()):
        cluster.run(source, settings=_settings(timeout=seconds * 4 + 60, on_data=on_data))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return counted[0] / wall, cpu / wall


def death_named(cluster: TFCluster) -> float:
    """Seconds from SIGKILL of the last worker until its cell failed naming it."""
    victim = cluster.workers[-1]
    killed_at: list[float] = []

    def kill_later() -> None:
        time.sleep(2.0)
        killed_at.append(time.monotonic())
        os.kill(victim.pid, signal.SIGKILL)

    killer = threading.Thread(target=kill_later)
    killer.start()
    try:
        cluster.run_once("import time\ntime.sleep(120)", _settings(timeout=180), FitState())
    except WorkerFailed as failure:
        ended = time.monotonic()
        if f"pid {victim.pid}" not in str(failure):
            raise RuntimeError(f"the failure did not name worker pid {victim.pid}: "
                               f"{failure}") from None
        return ended - killed_at[0]
    finally:
        killer.join()
    raise RuntimeError("the cell did not fail after its worker was killed")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[8, 32, 128])
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--seconds", type=int, default=10, help="the training cell's length")
    parser.add_argument("--steps-per-second", type=int, default=100)
    args = parser.parse_args()
    print(f"{'N':>4} {'start s':>8} {'trivial ms':>11} {'events/s':>9} "
          f"{'notebook CPU':>13} {'(no dashboard)':>15} {'death named s':>14}", flush=True)
    for n in args.workers:
        began = time.perf_counter()
        # Engines register at about 1.5 a second on 2 cores: the deadline grows with N.
        cluster = stub_cluster(n, timeout=120 + 3 * n)
        started = time.perf_counter() - began
        try:
            round_trip = trivial(cluster, args.calls)
            rate, share = events(cluster, args.seconds, args.steps_per_second)
            _, bare = events(cluster, args.seconds, args.steps_per_second, dashboard=False)
            named = death_named(cluster)
        finally:
            cluster.stop()
        print(f"{n:>4} {started:>8.1f} {round_trip:>11.1f} {rate:>9.0f} {share:>12.0%} "
              f"{bare:>15.0%} {named:>14.2f}", flush=True)
        print(f"     goals: trivial < 30 ms {'ok' if round_trip < 30 else 'MISSED'}, "
              f"notebook CPU < 10% {'ok' if share < 0.10 else 'MISSED'}, "
              f"death named < 5 s {'ok' if named < 5 else 'MISSED'}", flush=True)


if __name__ == "__main__":
    main()
