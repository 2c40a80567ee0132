#!/usr/bin/env python
"""tfmw_notebook against hand-started TensorFlow processes (and Ray Train), side by side.

One fixed job (2 workers, MultiWorkerMirroredStrategy, tf-keras, Dense(64, relu) ->
Dense(1) on generated data, 32 features, global batch 64, epochs x steps_per_epoch =
150 steps, verbose=0) is run by every contender, round-robin, `--repeat` times:

  floor        2 plain Python processes started here with TF_CONFIG (no ipyparallel)
  tfmw cold    TFCluster.start(2) -> the training cell -> stop
  tfmw warm    the training cell again on that cluster (the model is rebuilt in the cell)
  trivial      cluster.run("x = 1") round trip on the warm cluster
  dashboard    the training cell with the magic's reporting and live dashboard on vs off
  ray          TensorflowTrainer.fit() twice, only when `import ray` works
  threads      (--threads-experiment) floor processes with TF's default thread pools vs
               intra = inter = cores // workers

Prints medians [min-max] and ratios, writes JSON (--json). See benchmarks/README.md.
The parent never imports TensorFlow.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import datetime
import importlib.metadata
import io
import json
import os
import platform
import queue
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_JSON = os.path.join(HERE, "results", "latest.json")
WORKERS = 2
GLOBAL_BATCH = 64
FEATURES = 32
UNITS = 64

# Deadlines (seconds). Every wait in this file has one.
FLOOR_TIMEOUT = 300.0        # Popen -> every floor process exited
START_TIMEOUT = 180.0        # TFCluster.start
CELL_TIMEOUT = 300.0         # one training cell
TRIVIAL_TIMEOUT = 30.0       # one trivial cell
RAY_TIMEOUT = 600.0          # documented only: Ray's fit() has no deadline of its own

GOALS = {  # metric -> (comparison, bound, text)
    "boot": ("<=", 1.30, "<= 1.30x"),
    "fit_warm": ("<=", 1.05, "<= 1.05x"),
    "dashboard": (">=", 0.97, ">= 0.97x"),
    "trivial_ms": ("<", 50.0, "< 50 ms"),
}

# The training cell, the same text for every contender. It runs inside
# `strategy.scope()` with `tf` and `strategy` defined (tfmw's engines define them; the
# floor and Ray runners below do the same), and leaves `bench_fit_seconds` (model.fit
# alone) and `bench_loss` behind.
JOB_CELL = """\
import time
import numpy as np

_rng = np.random.default_rng(0)
_x = _rng.standard_normal(({samples}, {features})).astype("float32")
_y = (_x @ _rng.standard_normal(({features}, 1)) + 0.1).astype("float32")
_options = tf.data.Options()
_options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
dataset = (tf.data.Dataset.from_tensor_slices((_x, _y)).repeat().batch({batch})
           .with_options(_options))
model = tf.keras.Sequential([
    tf.keras.Input(shape=({features},)),
    tf.keras.layers.Dense({units}, activation="relu"),
    tf.keras.layers.Dense(1),
])
model.compile(optimizer=tf.keras.optimizers.SGD(learning_rate=0.01), loss="mse")
_began = time.perf_counter()
_history = model.fit(dataset, epochs={epochs}, steps_per_epoch={steps}, verbose=0)
bench_fit_seconds = time.perf_counter() - _began
bench_loss = float(_history.history["loss"][-1])
"""

# A floor worker: argv = cell file, threads (0 = TF's default), number of fits.
FLOOR_WORKER = """\
import json, sys, time

def say(**fields):
    print(json.dumps(fields), flush=True)

cell_path, threads, fits = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with open(cell_path) as f:
    code = compile(f.read(), "<bench job>", "exec")
import tensorflow as tf
tf.get_logger().setLevel("WARNING")   # as tfmw_notebook's bootstrap does
if threads:
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)
strategy = tf.distribute.MultiWorkerMirroredStrategy()
say(event="ready", tf_version=tf.__version__)
for index in range(fits):
    namespace = {"tf": tf, "strategy": strategy}
    began = time.perf_counter()
    with strategy.scope():
        exec(code, namespace)
    say(event="fit", index=index, cell_seconds=time.perf_counter() - began,
        fit_seconds=namespace["bench_fit_seconds"], loss=namespace["bench_loss"])
"""

# -- bookkeeping of what we started, for cleanup on any exit ---------------------------

_live_processes: set = set()
_live_clusters: list = []
_t0 = time.monotonic()


def progress(text: str) -> None:
    print(f"[{time.monotonic() - _t0:7.1f} s] {text}", flush=True)


class BenchError(RuntimeError):
    pass


def _kill_processes() -> None:
    for proc in list(_live_processes):
        if proc.poll() is None:
            try:
                proc.kill()
            except OSError:
                pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        _live_processes.discard(proc)


def _stop_clusters() -> None:
    while _live_clusters:
        cluster = _live_clusters.pop()
        try:
            cluster.stop()
        except Exception as exc:  # keep cleaning up the rest
            print(f"warning: stopping a cluster failed: {exc}", file=sys.stderr, flush=True)


def cleanup() -> None:
    """Kill floor processes and stop clusters; a second Ctrl-C cannot interrupt it."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        _kill_processes()
        _stop_clusters()
    finally:
        signal.signal(signal.SIGINT, previous)


def _terminate(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


# -- statistics -------------------------------------------------------------------------

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


# -- machine ----------------------------------------------------------------------------

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


# -- the floor: hand-started processes ---------------------------------------------------

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


def run_floor(workdir: str, cell_path: str, *, threads: int = 0, fits: int = 1,
              timeout: float = FLOOR_TIMEOUT) -> dict:
    """N hand-started workers. Times: boot = Popen -> last worker 'ready' (interpreter
    start, TF import and MWMS creation count), cell/fit = the chief's in-process time of
    fit number i, wall = Popen -> every process exited."""
    script = os.path.join(workdir, "floor_worker.py")
    if not os.path.exists(script):
        with open(script, "w") as f:
            f.write(FLOOR_WORKER)
    ports = free_ports(WORKERS)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    events: queue.Queue = queue.Queue()
    procs, popen_at, err_paths = [], [], []
    began = time.monotonic()
    try:
        for index in range(WORKERS):
            env = dict(os.environ,
                       TF_CONFIG=json.dumps({"cluster": cluster,
                                             "task": {"type": "worker", "index": index}}),
                       TF_USE_LEGACY_KERAS="1", CUDA_VISIBLE_DEVICES="-1",
                       TF_CPP_MIN_LOG_LEVEL="2")
            err_path = os.path.join(workdir, f"floor-{index}.stderr")
            err_paths.append(err_path)
            with open(err_path, "w") as err:
                popen_at.append(time.monotonic())
                proc = subprocess.Popen([sys.executable, script, cell_path, str(threads),
                                         str(fits)], stdout=subprocess.PIPE, stderr=err,
                                        stdin=subprocess.DEVNULL, env=env, text=True,
                                        start_new_session=True)  # Ctrl-C is ours to handle
            _live_processes.add(proc)
            procs.append(proc)
            threading.Thread(target=_pump, args=(index, proc, events), daemon=True).start()

        deadline = began + timeout
        ready = {}
        fit_lines: dict[int, list] = {i: [] for i in range(WORKERS)}
        exited = {}
        while len(exited) < WORKERS:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BenchError(f"floor processes did not finish within {timeout:g} s"
                                 + _stderr_tails(err_paths))
            try:
                stamp, index, message = events.get(timeout=min(remaining, 1.0))
            except queue.Empty:
                continue
            kind = message.get("event")
            if kind == "ready":
                ready[index] = stamp
            elif kind == "fit":
                fit_lines[index].append(message)
            elif kind == "exit":
                exited[index] = stamp
                if message["returncode"] != 0:
                    # The other worker would wait in its collectives forever.
                    raise BenchError(f"floor worker {index} exited with "
                                     f"{message['returncode']}" + _stderr_tails(err_paths))
        if len(ready) < WORKERS or any(len(fit_lines[i]) < fits for i in range(WORKERS)):
            raise BenchError("a floor worker exited without reporting" + _stderr_tails(err_paths))
        chief = fit_lines[0]
        return {
            "boot": max(ready.values()) - began,
            "boot_per_worker": [ready[i] - popen_at[i] for i in range(WORKERS)],
            "cells": [line["cell_seconds"] for line in chief],
            "fits": [line["fit_seconds"] for line in chief],
            "loss": chief[-1]["loss"],
            "wall": max(exited.values()) - began,
        }
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            if proc.stdout:
                proc.stdout.close()
            _live_processes.discard(proc)


def _stderr_tails(paths: list[str], lines: int = 8) -> str:
    parts = []
    for index, path in enumerate(paths):
        try:
            with open(path) as f:
                tail = f.read().strip().splitlines()[-lines:]
        except OSError:
            continue
        if tail:
            parts.append(f"\n  worker {index} stderr:\n    " + "\n    ".join(tail))
    return "".join(parts)


# -- tfmw_notebook --------------------------------------------------------------------------

def tfmw_start():
    from tfmw_notebook import TFCluster

    began = time.perf_counter()
    cluster = TFCluster.start(WORKERS, timeout=START_TIMEOUT)
    seconds = time.perf_counter() - began
    _live_clusters.append(cluster)
    return cluster, seconds


def tfmw_stop(cluster) -> float:
    began = time.perf_counter()
    try:
        cluster.stop()
    finally:
        if cluster in _live_clusters:
            _live_clusters.remove(cluster)
    return time.perf_counter() - began


def _run(cluster, source: str, **kwargs):
    """cluster.run, except that Ctrl-C stops the benchmark. TFCluster.run turns an
    interrupt into WorkerFailed(reason="interrupt") after restarting the workers (a
    second Ctrl-C during that restart skips it)."""
    from tfmw_notebook.errors import WorkerFailed

    try:
        return cluster.run(source, **kwargs)
    except WorkerFailed as failure:
        if failure.reason == "interrupt":
            raise KeyboardInterrupt(str(failure)) from None
        raise


def tfmw_cell(cluster, source: str, *, options: dict, on_data=None,
              timeout: float = CELL_TIMEOUT, inner: bool = True) -> dict:
    """Run a cell; `seconds` is its wall time as the notebook sees it."""
    out, err = io.StringIO(), io.StringIO()
    began = time.perf_counter()
    _run(cluster, source, options=options, on_data=on_data, timeout=timeout,
         stdout=out, stderr=err)
    result = {"seconds": time.perf_counter() - began}
    if inner:  # the chief's own model.fit time, read after the clock stopped
        values = cluster.pull(["bench_fit_seconds", "bench_loss"], rank=0)
        result["fit"] = values["bench_fit_seconds"]
        result["loss"] = values["bench_loss"]
    if err.getvalue().strip():
        result["stderr_tail"] = err.getvalue().strip().splitlines()[-3:]
    return result


def trivial_cells(cluster, count: int) -> list[float]:
    times = []
    for _ in range(count):
        began = time.perf_counter()
        _run(cluster, "x = 1", options={}, timeout=TRIVIAL_TIMEOUT)
        times.append((time.perf_counter() - began) * 1000.0)
    return times


def dashboard_cell(cluster, job: str, *, on: bool) -> dict:
    """The training cell with the dashboard off (options={}) or on, as the magic does it:
    report events, Keras progress quiet, events fed to a LiveRun(widgets=True) while the
    cell runs (matplotlib PNG redraws, progress widgets), then the final PNG."""
    if not on:
        return tfmw_cell(cluster, job, options={}, inner=False)
    from tfmw_notebook.widgets.live import LiveRun

    live = LiveRun(widgets=True)
    # Outside a kernel IPython's display() prints the widget's repr: swallow it.
    with contextlib.redirect_stdout(io.StringIO()):
        result = tfmw_cell(cluster, job, options={"report": True, "quiet_progress": True},
                           on_data=live.on_data, inner=False)
        # LiveRun.finish() needs the display handle of a kernel (display() returns None
        # outside one); do its work: the final PNG and the summary line.
        view = getattr(live, "_view", None)
        began = time.perf_counter()
        if view is not None:
            view.final_png()
            view.summary_line()
        result["finish"] = time.perf_counter() - began
    result["redraws"] = getattr(view, "redraws", None)
    result["ranks_reporting"] = len(live.store.ranks)
    if not live.store.ranks:
        raise BenchError("dashboard on: no worker reported any event")
    return result


# -- Ray Train ---------------------------------------------------------------------------------

def ray_available() -> bool:
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


def _ray_train_loop(config):  # runs in Ray's workers (TF_CONFIG set by Ray)
    import time as _time

    import tensorflow as tf
    from ray import train

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    namespace = {"tf": tf, "strategy": strategy}
    began = _time.perf_counter()
    with strategy.scope():
        exec(compile(config["cell"], "<bench job>", "exec"), namespace)
    train.report({"cell_seconds": _time.perf_counter() - began,
                  "fit_seconds": namespace["bench_fit_seconds"]})


def run_ray(job: str, workdir: str) -> dict:
    """ray.init, then two TensorflowTrainer.fit() of the job, then ray.shutdown."""
    import ray
    from ray.train import RunConfig, ScalingConfig
    from ray.train.tensorflow import TensorflowTrainer

    env = {"TF_USE_LEGACY_KERAS": "1", "CUDA_VISIBLE_DEVICES": "-1", "TF_CPP_MIN_LOG_LEVEL": "2"}
    began = time.perf_counter()
    ray.init(num_cpus=os.cpu_count(), runtime_env={"env_vars": env}, include_dashboard=False,
             log_to_driver=False)
    result = {"init": time.perf_counter() - began}
    try:
        for name in ("first", "second"):
            trainer = TensorflowTrainer(
                _ray_train_loop, train_loop_config={"cell": job},
                scaling_config=ScalingConfig(num_workers=WORKERS, use_gpu=False,
                                             resources_per_worker={"CPU": 1},
                                             trainer_resources={"CPU": 0}),
                run_config=RunConfig(storage_path=os.path.join(workdir, "ray"),
                                     name=f"bench-{name}-{time.time_ns()}"))
            began = time.perf_counter()
            fitted = trainer.fit()
            result[name] = time.perf_counter() - began
            result[f"{name}_fit_inside"] = (fitted.metrics or {}).get("fit_seconds")
    finally:
        ray.shutdown()
    return result


# -- the run -------------------------------------------------------------------------------

def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5, help="rounds (default 5)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 1 round, 30 steps, 10 trivial cells")
    parser.add_argument("--skip-cold", action="store_true",
                        help="start one tfmw cluster up front; measure warm cells only")
    parser.add_argument("--skip-ray", action="store_true", help="do not run Ray Train even if installed")
    parser.add_argument("--threads-experiment", action="store_true",
                        help="also: floor fit with TF's default thread pools vs "
                             "intra = inter = cores // workers")
    parser.add_argument("--trivial", type=int, default=None,
                        help="trivial cells per round (default 50, 10 with --quick)")
    parser.add_argument("--json", default=DEFAULT_JSON, metavar="PATH",
                        help="where to write the results (default benchmarks/results/latest.json)")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error(f"--repeat must be >= 1, got {args.repeat}")
    if args.quick:
        args.repeat = 1
    args.epochs, args.steps = (2, 15) if args.quick else (3, 50)
    if args.trivial is None:
        args.trivial = 10 if args.quick else 50
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    total_steps = args.epochs * args.steps
    job = JOB_CELL.format(samples=GLOBAL_BATCH * args.steps, features=FEATURES,
                          batch=GLOBAL_BATCH, units=UNITS, epochs=args.epochs, steps=args.steps)
    workdir = tempfile.mkdtemp(prefix="tfmw-bench-")
    # Registered before any ipyparallel Cluster exists, so it runs after their own atexit
    # stop (which, after an interrupted start, still needs the profile directory).
    atexit.register(shutil.rmtree, workdir, ignore_errors=True)
    # Keep ipyparallel's profile, cluster files and logs out of ~/.ipython (engines inherit it).
    os.environ["IPYTHONDIR"] = os.path.join(workdir, "ipython")
    cell_path = os.path.join(workdir, "job_cell.py")
    with open(cell_path, "w") as f:
        f.write(job)

    cores = os.cpu_count() or 1
    split_threads = max(1, cores // WORKERS)
    use_ray = not args.skip_ray and ray_available()
    report = {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": machine_info(),
        "args": {k: v for k, v in vars(args).items() if k != "json"},
        "job": {"workers": WORKERS, "model": f"Dense({UNITS}, relu) -> Dense(1)",
                "features": FEATURES, "global_batch": GLOBAL_BATCH, "epochs": args.epochs,
                "steps_per_epoch": args.steps, "steps": total_steps, "keras": "tf-keras",
                "strategy": "MultiWorkerMirroredStrategy", "cell": job},
        "rounds": [],
        "ray": "installed" if use_ray else ("skipped (--skip-ray)" if args.skip_ray
                                             else "ray not installed: skipped"),
        "complete": False,
    }
    m = report["machine"]
    progress(f"machine: {m['cores']} cores ({m['cpu_model']}), python {m['python']}, "
             f"TF {m['tensorflow']}, load {m['loadavg_at_start'][0]:.2f}")
    progress(f"job: {WORKERS} workers, {total_steps} steps, repeat {args.repeat}"
             + (", skip cold" if args.skip_cold else "")
             + (f", threads experiment (k={split_threads})" if args.threads_experiment else ""))
    if not use_ray:
        progress(report["ray"])

    shared = None  # --skip-cold: one warm cluster for every round
    exit_code = 0
    try:
        if args.skip_cold:
            shared, seconds = tfmw_start()
            tfmw_cell(shared, job, options={})  # warm-up: the cluster has run the job once
            progress(f"shared cluster up in {seconds:.1f} s and warmed up")
        for index in range(args.repeat):
            entry = {"round": index + 1}
            report["rounds"].append(entry)
            where = f"round {index + 1}/{args.repeat}"
            _round(entry, where, args, job, cell_path, workdir, shared, use_ray, split_threads,
                   index)
        report["complete"] = True
    except KeyboardInterrupt:
        progress("interrupted: cleaning up")
        exit_code = 130
    finally:
        cleanup()
        report["machine"]["loadavg_at_end"] = list(os.getloadavg())
        report["summary"] = summarize(report["rounds"], total_steps)
        if report["rounds"]:
            print_table(report, use_ray, args)
            os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
            with open(args.json, "w") as f:
                json.dump(report, f, indent=2)
            progress(f"wrote {args.json}")
    return exit_code


def _attempt(entry: dict, key: str, where: str, action):
    """Run one contender; a failure is recorded and the round goes on."""
    try:
        entry[key] = action()
        return entry[key]
    except Exception as exc:
        entry[key] = {"error": f"{type(exc).__name__}: {exc}"}
        progress(f"{where} {key}: FAILED {type(exc).__name__}: {exc}")
        if os.environ.get("BENCH_DEBUG"):
            traceback.print_exc()
        return None


def _round(entry, where, args, job, cell_path, workdir, shared, use_ray, split_threads, index):
    floor = _attempt(entry, "floor", where, lambda: run_floor(workdir, cell_path))
    if floor:
        progress(f"{where} floor: boot {floor['boot']:.2f} s, cell {floor['cells'][0]:.2f} s, "
                 f"wall {floor['wall']:.2f} s")

    # Filled as it goes: a failure late in the round keeps what was measured before it.
    tfmw = entry["tfmw"] = {}
    try:
        _tfmw_round(tfmw, where, args, job, shared, dashboard_on_first=index % 2 == 1)
    except Exception as exc:
        tfmw["failed"] = f"{type(exc).__name__}: {exc}"
        progress(f"{where} tfmw: FAILED {tfmw['failed']}")
        if os.environ.get("BENCH_DEBUG"):
            traceback.print_exc()

    if use_ray:
        ray = _attempt(entry, "ray", where, lambda: run_ray(job, workdir))
        if ray:
            progress(f"{where} ray: init {ray['init']:.1f} s, first fit {ray['first']:.1f} s, "
                     f"second fit {ray['second']:.1f} s")

    if args.threads_experiment:
        order = [0, split_threads] if index % 2 == 0 else [split_threads, 0]
        entry["threads"] = {}
        for threads in order:
            name = "default" if threads == 0 else "split"
            # Two fits per process: the second is the warm fit.
            result = _attempt(entry["threads"], name, where,
                              lambda: run_floor(workdir, cell_path, threads=threads, fits=2))
            if result:
                result["threads"] = threads
                progress(f"{where} threads {name} ({threads or 'TF default'}): warm fit "
                         f"{result['fits'][1]:.2f} s (cold {result['fits'][0]:.2f} s)")


def _tfmw_round(out, where, args, job, shared, *, dashboard_on_first: bool) -> None:
    cluster = shared
    try:
        if cluster is None:
            cluster, out["boot"] = tfmw_start()
            progress(f"{where} tfmw: started in {out['boot']:.2f} s")
            out["cold"] = tfmw_cell(cluster, job, options={})
            progress(f"{where} tfmw cold cell {out['cold']['seconds']:.2f} s "
                     f"(model.fit {out['cold']['fit']:.2f} s)")
        out["warm"] = tfmw_cell(cluster, job, options={})
        progress(f"{where} tfmw warm cell {out['warm']['seconds']:.2f} s "
                 f"(model.fit {out['warm']['fit']:.2f} s)")
        out["trivial_ms"] = trivial_cells(cluster, args.trivial)
        progress(f"{where} trivial cell: median {statistics.median(out['trivial_ms']):.1f} ms "
                 f"over {args.trivial}")
        out["dashboard"] = {}
        for on in ((True, False) if dashboard_on_first else (False, True)):
            name = "on" if on else "off"
            out["dashboard"][name] = dashboard_cell(cluster, job, on=on)
            progress(f"{where} dashboard {name}: cell {out['dashboard'][name]['seconds']:.2f} s")
    finally:
        if cluster is not None and cluster is not shared:
            out["stop"] = tfmw_stop(cluster)


# -- summary and table ------------------------------------------------------------------------

def _ok(entry):
    return entry if isinstance(entry, dict) and "error" not in entry else None


def summarize(rounds: list[dict], steps: int) -> dict:
    def col(path):
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

    def first(values):
        return [v[0] if isinstance(v, list) else v for v in values]

    s = {
        "floor_boot": stats(col(["floor", "boot"])),
        "floor_cell": stats(first(col(["floor", "cells"]))),
        "floor_fit": stats(first(col(["floor", "fits"]))),
        "floor_wall": stats(col(["floor", "wall"])),
        "tfmw_boot": stats(col(["tfmw", "boot"])),
        "tfmw_cold_cell": stats(col(["tfmw", "cold", "seconds"])),
        "tfmw_cold_fit": stats(col(["tfmw", "cold", "fit"])),
        "tfmw_warm_cell": stats(col(["tfmw", "warm", "seconds"])),
        "tfmw_warm_fit": stats(col(["tfmw", "warm", "fit"])),
        "tfmw_stop": stats(col(["tfmw", "stop"])),
        "dashboard_off_cell": stats(col(["tfmw", "dashboard", "off", "seconds"])),
        "dashboard_on_cell": stats(col(["tfmw", "dashboard", "on", "seconds"])),
        "dashboard_on_finish": stats(col(["tfmw", "dashboard", "on", "finish"])),
        "ray_init": stats(col(["ray", "init"])),
        "ray_first": stats(col(["ray", "first"])),
        "ray_second": stats(col(["ray", "second"])),
        "threads_default_warm_fit": stats(col(["threads", "default", "fits"]) and
                                          [v[1] for v in col(["threads", "default", "fits"])]),
        "threads_split_warm_fit": stats(col(["threads", "split", "fits"]) and
                                        [v[1] for v in col(["threads", "split", "fits"])]),
        "threads_default_cold_fit": stats(first(col(["threads", "default", "fits"]))),
        "threads_split_cold_fit": stats(first(col(["threads", "split", "fits"]))),
    }
    trivial = [ms for values in col(["tfmw", "trivial_ms"]) for ms in values]
    s["trivial_ms"] = stats(trivial)
    # tfmw cold wall = start + cold cell, per round
    s["tfmw_wall"] = stats([e["tfmw"]["boot"] + e["tfmw"]["cold"]["seconds"] for e in rounds
                            if "boot" in e.get("tfmw", {}) and "cold" in e["tfmw"]])
    for name in ("off", "on"):
        cell = s[f"dashboard_{name}_cell"]
        s[f"dashboard_{name}_steps_per_s"] = stats(
            [steps / v for v in col(["tfmw", "dashboard", name, "seconds"])]) if cell else None
    s["ratios"] = {
        "boot": ratio(s["tfmw_boot"], s["floor_boot"]),
        "fit_cold": ratio(s["tfmw_cold_cell"], s["floor_cell"]),
        "fit_warm": ratio(s["tfmw_warm_cell"], s["floor_cell"]),
        "model_fit_warm": ratio(s["tfmw_warm_fit"], s["floor_fit"]),
        "wall": ratio(s["tfmw_wall"], s["floor_wall"]),
        "tfmw_wall_vs_ray_first": ratio(s["tfmw_wall"], s["ray_first"]),
        "tfmw_warm_vs_ray_second": ratio(s["tfmw_warm_cell"], s["ray_second"]),
        "dashboard": ratio(s["dashboard_on_steps_per_s"], s["dashboard_off_steps_per_s"]),
        "threads_split_vs_default": ratio(s["threads_split_warm_fit"],
                                          s["threads_default_warm_fit"]),
    }
    goals = {}
    for key, (op, bound, text) in GOALS.items():
        value = s["trivial_ms"]["median"] if key == "trivial_ms" and s["trivial_ms"] else \
            s["ratios"].get(key)
        met = None if value is None else {"<=": value <= bound, ">=": value >= bound,
                                          "<": value < bound}[op]
        goals[key] = {"goal": text, "value": value, "met": met}
    s["goals"] = goals
    return s


def _cell(st: dict | None, digits: int = 2) -> str:
    if not st:
        return "-"
    text = f"{st['median']:.{digits}f}"
    if st["n"] > 1:
        text += f" [{st['min']:.{digits}f}-{st['max']:.{digits}f}]"
    return text


def _ratio_text(value) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _goal_text(summary, key) -> str:
    goal = summary["goals"].get(key)
    if not goal:
        return ""
    verdict = "" if goal["met"] is None else (" ok" if goal["met"] else " MISSED")
    return goal["goal"] + verdict


def print_table(report: dict, use_ray: bool, args) -> None:
    s = report["summary"]
    r = s["ratios"]
    m = report["machine"]
    line = "-" * 96
    print(line)
    print(f"tfmw_notebook benchmark  {report['date']}  {m['hostname']}")
    print(f"machine: {m['cores']} cores ({m['usable_cores']} usable), {m['cpu_model']}, "
          f"python {m['python']}, TF {m['tensorflow']}, tf-keras {m['tf_keras']}, "
          f"ipyparallel {m['ipyparallel']}")
    print(f"load average (1 min) start {m['loadavg_at_start'][0]:.2f}, "
          f"end {m.get('loadavg_at_end', [float('nan')])[0]:.2f}")
    j = report["job"]
    print(f"job: {j['workers']} workers, {j['model']}, {j['features']} features, global batch "
          f"{j['global_batch']}, {j['epochs']}x{j['steps_per_epoch']} = {j['steps']} steps; "
          f"rounds: {len(report['rounds'])}" + ("" if report["complete"] else " (INCOMPLETE)"))
    print("medians [min-max] in seconds unless noted; ratio = tfmw / floor (of medians)")
    print(line)
    fmt = "{:<34}{:>22}{:>22}{:>9}  {}"
    print(fmt.format("metric", "floor", "tfmw", "ratio", "goal"))
    rows = [
        ("boot (start -> ready) s", s["floor_boot"], s["tfmw_boot"], r["boot"], "boot"),
        ("fit (cold cell) s", s["floor_cell"], s["tfmw_cold_cell"], r["fit_cold"], None),
        ("fit (warm cell) s", s["floor_cell"], s["tfmw_warm_cell"], r["fit_warm"], "fit_warm"),
        ("  model.fit alone (warm) s", s["floor_fit"], s["tfmw_warm_fit"], r["model_fit_warm"],
         None),
        ("wall (start -> trained) s", s["floor_wall"], s["tfmw_wall"], r["wall"], None),
        ("stop s", None, s["tfmw_stop"], None, None),
    ]
    for label, floor, tfmw, value, goal in rows:
        print(fmt.format(label, _cell(floor), _cell(tfmw), _ratio_text(value),
                         _goal_text(s, goal) if goal else ""))
    print(line)
    if use_ray and (s["ray_first"] or s["ray_second"]):
        fmt3 = "{:<34}{:>22}{:>22}{:>9}"
        print(fmt3.format("vs Ray Train", "ray", "tfmw", "tfmw/ray"))
        print(fmt3.format("ray.init s", _cell(s["ray_init"]), "-", "-"))
        print(fmt3.format("first fit() vs tfmw wall s", _cell(s["ray_first"]),
                          _cell(s["tfmw_wall"]), _ratio_text(r["tfmw_wall_vs_ray_first"])))
        print(fmt3.format("second fit() vs warm cell s", _cell(s["ray_second"]),
                          _cell(s["tfmw_warm_cell"]), _ratio_text(r["tfmw_warm_vs_ray_second"])))
    else:
        print(f"Ray Train: {report['ray']}" + ("" if report["ray"] != "installed"
                                                else " (every Ray run failed)"))
    print(line)
    fmt4 = "{:<34}{:>22}{:>22}{:>9}  {}"
    print(fmt4.format("dashboard (warm cluster)", "off", "on", "on/off", "goal"))
    print(fmt4.format("steps/s", _cell(s["dashboard_off_steps_per_s"], 1),
                      _cell(s["dashboard_on_steps_per_s"], 1), _ratio_text(r["dashboard"]),
                      _goal_text(s, "dashboard")))
    print(fmt4.format("cell s", _cell(s["dashboard_off_cell"]), _cell(s["dashboard_on_cell"]),
                      "", ""))
    print(fmt4.format("final PNG after the cell s", "-", _cell(s["dashboard_on_finish"]), "", ""))
    print(line)
    t = s["trivial_ms"]
    if t:
        extra = f", p90 {t['p90']:.1f}" if "p90" in t else ""
        print(f"trivial cell round trip: median {t['median']:.1f} ms (min {t['min']:.1f}, "
              f"max {t['max']:.1f}{extra}, n={t['n']})   goal {_goal_text(s, 'trivial_ms')}")
    else:
        print("trivial cell round trip: -")
    if args.threads_experiment:
        print(line)
        fmt5 = "{:<34}{:>14}{:>14}{:>14}{:>14}"
        print(f"threads experiment (floor processes, warm = 2nd fit in the process; "
              f"split = intra = inter = {max(1, (os.cpu_count() or 1) // WORKERS)})")
        print(fmt5.format("", "median s", "stdev s", "IQR s", "min-max s"))
        for label, key in (("TF default pools, warm fit", "threads_default_warm_fit"),
                           ("split pools, warm fit", "threads_split_warm_fit"),
                           ("TF default pools, cold fit", "threads_default_cold_fit"),
                           ("split pools, cold fit", "threads_split_cold_fit")):
            st = s[key]
            if not st:
                print(fmt5.format(label, "-", "-", "-", "-"))
                continue
            dev = "-" if st["stdev"] is None else f"{st['stdev']:.2f}"
            iqr = "-" if st["iqr"] is None else f"{st['iqr']:.2f}"
            print(fmt5.format(label, f"{st['median']:.2f}", dev, iqr,
                              f"{st['min']:.2f}-{st['max']:.2f}"))
        print(f"split / default (warm, medians): {_ratio_text(r['threads_split_vs_default'])}")
    errors = [(e["round"], key) for e in report["rounds"] for key, v in e.items()
              if isinstance(v, dict) and ("error" in v or "failed" in v
                                          or any(isinstance(w, dict) and "error" in w
                                                 for w in v.values()))]
    if errors:
        print(line)
        print("failed: " + ", ".join(f"round {n} {key}" for n, key in errors)
              + " (messages in the JSON)")
    print(line, flush=True)


if __name__ == "__main__":
    sys.exit(main())
