"""What every contender shares: the job, the deadlines, progress lines and cleanup."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import traceback

WORKERS = 2
# Warm cells per round on each side (the floor fits again in its processes): their
# median is the round's warm time, steadier than one cell.
WARM_CELLS = 3
# Dashboard off/on pairs per round: its goal (>= 0.97x) sits within a few percent of
# the two sides' difference, so it gets more samples than the warm cell (6 a round
# left its 90% interval 6-11% wide over 9 rounds).
DASHBOARD_PAIRS = 8
# Start-ups only (start, ready, stop) per round on each side, after the cells: one boot a
# round gave 9 samples a side, too few for the boot goal's verdict to repeat; with 2
# extra (27 a side) its 90% interval was still 8-10% wide, across the 1.30x bound.
EXTRA_BOOTS = 4
GLOBAL_BATCH = 64
FEATURES = 32
UNITS = 64

# Deadlines (seconds). Every wait in this package has one, except Ray's fit().
FLOOR_TIMEOUT = 300.0        # Popen -> every floor process exited
START_TIMEOUT = 180.0        # TFCluster.start
CELL_TIMEOUT = 300.0         # one training cell
TRIVIAL_TIMEOUT = 30.0       # one trivial cell
RAY_TIMEOUT = 600.0          # documented only: Ray's fit() has no deadline of its own

# The training cell, the same text for every contender. It runs inside
# `strategy.scope()` with `tf` and `strategy` defined (tfmw's engines define them; the
# floor and Ray runners do the same), and leaves `bench_fit_seconds` (model.fit
# alone), `bench_loop_seconds` (its training loop: on_train_begin -> on_train_end) and
# `bench_loss` behind.
LOOP_CLOCK = """\
class _LoopClock(tf.keras.callbacks.Callback):
    # The training loop's seconds, first step to last: fit() may stall after its last
    # step while TensorFlow frees the input iterator (benchmarks/README.md).
    def on_train_begin(self, logs=None):
        self.began = time.perf_counter()

    def on_train_end(self, logs=None):
        global bench_loop_seconds
        bench_loop_seconds = time.perf_counter() - self.began
"""

JOB_CELL = """\
import time
import numpy as np

{clock}
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
_history = model.fit(dataset, epochs={epochs}, steps_per_epoch={steps}, verbose=0,
                     callbacks=[_LoopClock()])
bench_fit_seconds = time.perf_counter() - _began
bench_loss = float(_history.history["loss"][-1])
"""


def cnn_model_code(learning_rate: float) -> str:
    """The CNN of TensorFlow's multi-worker Keras tutorial, built and compiled as `model`."""
    return f"""\
model = tf.keras.Sequential([
    tf.keras.layers.InputLayer(input_shape=(28, 28)),
    tf.keras.layers.Reshape(target_shape=(28, 28, 1)),
    tf.keras.layers.Conv2D(32, 3, activation="relu"),
    tf.keras.layers.Flatten(),
    tf.keras.layers.Dense(128, activation="relu"),
    tf.keras.layers.Dense(10),
])
model.compile(loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
              optimizer=tf.keras.optimizers.SGD(learning_rate={learning_rate}),
              metrics=["accuracy"])
"""


# The second job, with heavier steps: the CNN of TensorFlow's multi-worker Keras
# tutorial (64 images per worker per step), on generated 28x28 images.
CNN_BATCH = 64 * WORKERS
CNN_CELL = """\
import time
import numpy as np

{clock}
_rng = np.random.default_rng(0)
_x = _rng.uniform(0, 1, ({samples}, 28, 28)).astype("float32")
_y = _rng.integers(0, 10, {samples}).astype("int64")
_options = tf.data.Options()
_options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
dataset = (tf.data.Dataset.from_tensor_slices((_x, _y)).repeat().batch({batch})
           .with_options(_options))
{model}_began = time.perf_counter()
_history = model.fit(dataset, epochs={epochs}, steps_per_epoch={steps}, verbose=0,
                     callbacks=[_LoopClock()])
bench_fit_seconds = time.perf_counter() - _began
bench_loss = float(_history.history["loss"][-1])
"""
JOBS = {
    "dense": {"model": f"Dense({UNITS}, relu) -> Dense(1)", "features": FEATURES,
              "global_batch": GLOBAL_BATCH},
    "cnn": {"model": "the tutorial's CNN: Conv2D(32, 3) -> Dense(128) -> Dense(10)",
            "features": "28x28", "global_batch": CNN_BATCH},
}


def job_cell(epochs: int, steps: int, job: str = "dense") -> str:
    """The training cell for `epochs` x `steps` steps (one pass over the data per epoch)."""
    if job == "cnn":
        return CNN_CELL.format(samples=CNN_BATCH * steps, batch=CNN_BATCH, epochs=epochs,
                               steps=steps, model=cnn_model_code(0.001), clock=LOOP_CLOCK)
    return JOB_CELL.format(samples=GLOBAL_BATCH * steps, features=FEATURES,
                           batch=GLOBAL_BATCH, units=UNITS, epochs=epochs, steps=steps,
                           clock=LOOP_CLOCK)


_t0 = time.monotonic()


def progress(text: str) -> None:
    print(f"[{time.monotonic() - _t0:7.1f} s] {text}", flush=True)


class BenchError(RuntimeError):
    pass


def report_failure(where: str, what: str, exc: BaseException) -> str:
    """Say that `what` failed (with the traceback under BENCH_DEBUG); return the message."""
    message = f"{type(exc).__name__}: {exc}"
    progress(f"{where} {what}: FAILED {message}")
    if os.environ.get("BENCH_DEBUG"):
        traceback.print_exc()
    return message


def attempt(entry: dict, key: str, where: str, action):
    """Run one contender; a failure is recorded and the round goes on."""
    try:
        entry[key] = action()
        return entry[key]
    except Exception as exc:
        entry[key] = {"error": report_failure(where, key, exc)}
        return None


# -- what we started, for cleanup on any exit --------------------------------------------

live_processes: set = set()
live_clusters: list = []


def _kill_processes() -> None:
    for proc in list(live_processes):
        if proc.poll() is None:
            try:
                proc.kill()
            except OSError:
                pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        live_processes.discard(proc)


def _stop_clusters() -> None:
    while live_clusters:
        cluster = live_clusters.pop()
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


def terminate(signum, frame):
    """SIGTERM handler: unwind like Ctrl-C, so the same cleanup runs."""
    raise KeyboardInterrupt(f"signal {signum}")
