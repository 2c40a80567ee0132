"""One start's timeline beside the floor's (boot_profile.py --timeline): when each phase of
`TFCluster.start(2)` ended, and when the floor's hand-started processes reached the same
points, from the moment each side began, through their first collective.

The floor's workers print a wall-clock stamp at each point (interpreter up, TensorFlow
imported, strategy made, first all-reduce done); tfmw's phases are stamped in this
process (controller up, engines launched, registered, TF_CONFIG handshake, workers made,
the start's return, a first cell with an all-reduce) and, from the process table, when
the fork server and each engine process were created (an engine is forked once the
server has imported TensorFlow).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time

from .common import BenchError, live_clusters, live_processes
from .floor import free_ports

FLOOR_PHASES = ("python up", "tf imported", "strategy made", "first collective")
TFMW_PHASES = ("controller", "fork server created", "engines launched", "engines forked",
               "registered", "handshake (TF_CONFIG)", "workers made", "start returned",
               "first collective", "(bootstrap, its length)")
# The first all-reduce, the same on both sides: one scalar summed over the workers.
COLLECTIVE = ("_one = strategy.reduce('SUM', strategy.run(lambda: tf.constant(1.0)), "
              "axis=None)\n")

FLOOR_WORKER = """\
import json, sys, time
def say(event):
    print(json.dumps({"event": event, "at": time.time()}), flush=True)
say("python up")
import tensorflow as tf
say("tf imported")
tf.get_logger().setLevel("WARNING")
strategy = tf.distribute.MultiWorkerMirroredStrategy()
say("strategy made")
exec(sys.argv[1])
say("first collective")
"""


def floor_timeline(workdir: str, keras: int, size: int = 2, timeout: float = 300.0) -> dict:
    """Seconds from the first Popen to each floor phase, the last worker's."""
    cluster = {"worker": [f"127.0.0.1:{port}" for port in free_ports(size)]}
    procs, began = [], time.time()
    try:
        for index in range(size):
            env = dict(os.environ, TF_CONFIG=json.dumps(
                {"cluster": cluster, "task": {"type": "worker", "index": index}}),
                TF_USE_LEGACY_KERAS="1" if keras == 2 else "0", CUDA_VISIBLE_DEVICES="-1",
                TF_CPP_MIN_LOG_LEVEL="2")
            proc = subprocess.Popen([sys.executable, "-c", FLOOR_WORKER, COLLECTIVE],
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                    stdin=subprocess.DEVNULL, env=env, text=True,
                                    start_new_session=True, cwd=workdir)
            live_processes.add(proc)
            procs.append(proc)
        stamps = [_stamps(proc, began + timeout) for proc in procs]
    finally:
        _reap(procs)
    return {phase: max(s[phase] for s in stamps) - began for phase in FLOOR_PHASES}


def _stamps(proc, deadline: float) -> dict:
    """The worker's stamps, read until it exits (the deadline kills it)."""
    try:
        out, _ = proc.communicate(timeout=max(1.0, deadline - time.time()))
    except subprocess.TimeoutExpired:
        proc.kill()
        raise BenchError("a floor worker did not finish its first collective in time") from None
    stamps = {}
    for line in out.splitlines():
        try:
            message = json.loads(line)
        except ValueError:
            continue
        stamps[message["event"]] = message["at"]
    if proc.returncode != 0 or set(stamps) != set(FLOOR_PHASES):
        raise BenchError(f"a floor worker exited with {proc.returncode}, stamps {sorted(stamps)}")
    return stamps


def _reap(procs) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        live_processes.discard(proc)


def tfmw_timeline(marks: dict, keras: int, size: int = 2) -> dict:
    """`TFCluster.start(size)` and a first all-reduce cell; seconds from the call to each
    phase (`marks` is filled by boot_profile.instrument, with "handshake (TF_CONFIG)")."""
    from tfmw_notebook import TFCluster

    marks.clear()
    marks["began"], wall_began = time.perf_counter(), time.time()
    cluster = TFCluster.start(size, gpus_per_worker=0, keras=keras)   # the floor hides GPUs
    live_clusters.append(cluster)
    try:
        marks["start returned"] = time.perf_counter() - marks["began"]
        cluster.run(COLLECTIVE, want_display=False, record=False,
                    stderr=io.StringIO())   # TensorFlow's warning that eager all-reduces are slow
        marks["first collective"] = time.perf_counter() - marks["began"]
        created = _created(cluster)
    finally:
        cluster.stop()
        live_clusters.remove(cluster)
    marks.update({phase: at - wall_began for phase, at in created.items()})
    return {phase: marks.get(phase) for phase in TFMW_PHASES}


def _created(cluster) -> dict:
    """When the fork server and the last engine process were created (wall clock)."""
    import psutil

    found = {}
    forks = getattr(cluster._group, "forks", None)
    if forks is not None:
        found["fork server created"] = psutil.Process(forks.process.pid).create_time()
    found["engines forked"] = max(psutil.Process(w.pid).create_time() for w in cluster.workers)
    return found
