"""The floor: the job in plain Python processes started here with TF_CONFIG."""

from __future__ import annotations

import json
import os
import queue
import socket
import subprocess
import sys
import threading
import time

from . import keras_choice
from .common import FLOOR_TIMEOUT, WORKERS, BenchError, live_processes

# A floor worker: argv = cell file, threads (0 = TF's default), number of fits, Keras (3 or
# 2). With Keras 3 it applies the corrections tfmw's workers apply, after the strategy exists.
FLOOR_WORKER = """\
import json, sys, time

def say(**fields):
    print(json.dumps(fields), flush=True)

cell_path, threads, fits = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
keras = int(sys.argv[4]) if len(sys.argv) > 4 else 2
with open(cell_path) as f:
    code = compile(f.read(), "<bench job>", "exec")
import tensorflow as tf
tf.get_logger().setLevel("WARNING")   # as tfmw_notebook's bootstrap does
if threads:
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)
strategy = tf.distribute.MultiWorkerMirroredStrategy()
if keras == 3:
    from tfmw_notebook.worker.corrections import keras3_corrections
    keras3_corrections.apply()
say(event="ready", tf_version=tf.__version__, cpu_seconds=time.process_time())
for index in range(fits):
    namespace = {"tf": tf, "strategy": strategy}
    began = time.perf_counter()
    with strategy.scope():
        exec(code, namespace)
    import resource
    say(event="fit", index=index, cell_seconds=time.perf_counter() - began,
        fit_seconds=namespace["bench_fit_seconds"], loss=namespace["bench_loss"],
        loop_seconds=namespace["bench_loop_seconds"],
        peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
"""


def free_ports(n: int) -> list[int]:
    sockets = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _pump(index: int, proc, events: queue.Queue) -> None:
    """Forward a floor process's JSON lines, stamped on arrival, then its exit."""
    for line in proc.stdout:
        stamp = time.monotonic()
        try:
            message = json.loads(line)
        except ValueError:
            continue  # not ours (a library printing to stdout)
        events.put((stamp, index, message))
    proc.wait()  # stdout closed: the process is exiting (the main loop enforces the deadline)
    events.put((time.monotonic(), index, {"event": "exit", "returncode": proc.returncode}))


class _Workers:
    """One floor run's processes, their stderr files and the queue their pumps feed."""

    def __init__(self, workdir: str, size: int):
        self.workdir, self.size = workdir, size
        self.events: queue.Queue = queue.Queue()
        self.procs: list = []
        self.popen_at: list[float] = []
        self.err_paths: list[str] = []

    def spawn(self, index: int, argv: list[str], cluster: dict) -> None:
        env = dict(os.environ,
                   TF_CONFIG=json.dumps({"cluster": cluster,
                                         "task": {"type": "worker", "index": index}}),
                   TF_USE_LEGACY_KERAS=keras_choice.legacy_flag(), CUDA_VISIBLE_DEVICES="-1",
                   TF_CPP_MIN_LOG_LEVEL="2")
        err_path = os.path.join(self.workdir, f"floor-{index}.stderr")
        self.err_paths.append(err_path)
        with open(err_path, "w") as err:
            self.popen_at.append(time.monotonic())
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err,
                                    stdin=subprocess.DEVNULL, env=env, text=True,
                                    start_new_session=True)  # Ctrl-C is ours to handle
        live_processes.add(proc)
        self.procs.append(proc)
        threading.Thread(target=_pump, args=(index, proc, self.events), daemon=True).start()

    def collect(self, deadline: float, timeout: float, fits: int):
        """Events until every process exited: (ready stamps, fit lines, exit stamps)."""
        ready, exited = {}, {}
        self.ready_cpu: dict[int, float] = {}
        fit_lines: dict[int, list] = {i: [] for i in range(self.size)}
        while len(exited) < self.size:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BenchError(f"floor processes did not finish within {timeout:g} s"
                                 + self.stderr_tails())
            try:
                stamp, index, message = self.events.get(timeout=min(remaining, 1.0))
            except queue.Empty:
                continue
            kind = message.get("event")
            if kind == "ready":
                ready[index] = stamp
                self.ready_cpu[index] = message.get("cpu_seconds", 0.0)
            elif kind == "fit":
                fit_lines[index].append(dict(message, stamp=stamp))
            elif kind == "exit":
                exited[index] = stamp
                if message["returncode"] != 0:
                    # The other worker would wait in its collectives forever.
                    raise BenchError(f"floor worker {index} exited with "
                                     f"{message['returncode']}" + self.stderr_tails())
        if len(ready) < self.size or any(len(fit_lines[i]) < fits for i in range(self.size)):
            raise BenchError("a floor worker exited without reporting" + self.stderr_tails())
        return ready, fit_lines, exited

    def reap(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            if proc.stdout:
                proc.stdout.close()
            live_processes.discard(proc)

    def stderr_tails(self, lines: int = 8) -> str:
        parts = []
        for index, path in enumerate(self.err_paths):
            try:
                with open(path) as f:
                    tail = f.read().strip().splitlines()[-lines:]
            except OSError:
                continue
            if tail:
                parts.append(f"\n  worker {index} stderr:\n    " + "\n    ".join(tail))
        return "".join(parts)


def cells_until_all_finished(ready: dict, fit_lines: dict) -> list[float]:
    """Fit k as a notebook cell would see it: from every worker done with fit k - 1 (the
    first: every worker ready) to every worker done with fit k. The chief's own times
    leave out a stall that kept another worker (a tfmw cell waits for all of them)."""
    ends = [max(lines[k]["stamp"] for lines in fit_lines.values())
            for k in range(min(len(lines) for lines in fit_lines.values()))]
    return [end - start for start, end in zip([max(ready.values())] + ends, ends)]


def run_floor(workdir: str, cell_path: str, *, threads: int = 0, fits: int = 1,
              timeout: float = FLOOR_TIMEOUT, size: int = WORKERS) -> dict:
    """N hand-started workers. Times: boot = Popen -> last worker 'ready' (interpreter
    start, TF import and MWMS creation count), cell/fit = the chief's in-process time of
    fit number i (cells_all: until every worker finished it), wall = Popen -> every
    process exited."""
    script = os.path.join(workdir, "floor_worker.py")
    if not os.path.exists(script):
        with open(script, "w") as f:
            f.write(FLOOR_WORKER)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in free_ports(size)]}
    workers = _Workers(workdir, size)
    began = time.monotonic()
    try:
        for index in range(size):
            workers.spawn(index, [sys.executable, script, cell_path, str(threads), str(fits),
                                  str(keras_choice.current)], cluster)
        ready, fit_lines, exited = workers.collect(began + timeout, timeout, fits)
        chief = fit_lines[0]
        return {
            "boot": max(ready.values()) - began,
            "boot_per_worker": [ready[i] - workers.popen_at[i] for i in range(size)],
            "boot_cpu": sum(workers.ready_cpu.values()),   # CPU seconds until ready
            "cells": [line["cell_seconds"] for line in chief],
            "cells_all": cells_until_all_finished(ready, fit_lines),
            "fits": [line["fit_seconds"] for line in chief],
            "loops": [line["loop_seconds"] for line in chief],
            "loss": chief[-1]["loss"] if chief else None,
            "peak_rss_mb": [fit_lines[i][-1].get("peak_rss_mb") if fit_lines[i] else None
                            for i in range(size)],
            "wall": max(exited.values()) - began,
        }
    finally:
        workers.reap()
