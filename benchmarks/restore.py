#!/usr/bin/env python
"""How long the workers take to get their state back after a restart, side by side.

Three clusters of 2 workers each hold one trained job:

  quickstart   notebooks/01_quickstart's model and fit (5 epochs x 20 steps)
  cnn-3        the TensorFlow tutorial's CNN (digits scaled to 28x28), 3 epochs
  cnn-30       the same CNN, 30 epochs (same steps per epoch)

All fits save automatic checkpoints, as `%%tfdist` does by default. Then, round-robin
over the clusters, `--repeat` times: a cell where worker 1 raises while worker 0 waits in an
all-reduce forces a restart; the restore that follows replays the earlier cells. Each
round checks that the model's digest and step count came back and that no epoch ran, and
records the restore time (`cluster.last_restore.seconds`) and the whole failure -> ready time.
The claim to check: restore time does not grow with the epochs trained (cnn-30 / cnn-3).

Then the price of keeping state: the cnn-3 fit with checkpoints off, once with the
end-of-fit snapshot (restore on, the default) and once without (`restore_state = False`),
alternated `--repeat` times.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import statistics
import sys
import tempfile
import time

from tfmw_notebook import CellOptions, CheckpointPolicy, TFCluster, WorkerFailed

from tfmw_bench.common import cnn_model_code  # the package next to this file
from tfmw_bench.table import row

HERE = os.path.dirname(os.path.abspath(__file__))
# The summary table's columns (gap, format spec): job, trained in, restore, failure -> ready.
TABLE = ((0, "<11"), (1, ">10"), (3, "<34"), (1, ""))

QUICKSTART = '''
import numpy as np
x = np.arange(0, 200, dtype="float32")[:, None] / 200
y = 2 * x
dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(200, seed=0).batch(32).repeat()
model = tf.keras.Sequential([tf.keras.layers.Dense(10, input_shape=(1,)), tf.keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse", metrics=["mae"])
'''
QUICKSTART_FIT = "history = model.fit(dataset, epochs=5, steps_per_epoch=20, verbose=0, " \
                 "callbacks=[CountEpochs()])"

CNN = '''
import numpy as np
from sklearn.datasets import load_digits
digits = load_digits()
images = np.pad(np.kron(digits.images, np.ones((3, 3))), ((0, 0), (2, 2), (2, 2))) / 16.0
dataset = (tf.data.Dataset.from_tensor_slices((images.astype("float32"),
                                               digits.target.astype("int64")))
           .shuffle(2000, seed=1).repeat().batch(128))
''' + cnn_model_code(0.01)
CNN_FIT = "history = model.fit(dataset, epochs={epochs}, steps_per_epoch={steps}, verbose=0, " \
          "callbacks=[CountEpochs()])"

COUNT_EPOCHS = '''
EPOCHS_BEGUN = [0]
class CountEpochs(tf.keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        EPOCHS_BEGUN[0] += 1
'''
# Globals of the fresh workers: EPOCHS_BEGUN comes back as [0] from the replayed
# setup cell, and stays 0 only if no replayed fit ran an epoch.
STATE = ("from tfmw_notebook.worker.writes.checkpointing import weights_digest\n"
         "(weights_digest('model'), int(model.optimizer.iterations.numpy()), EPOCHS_BEGUN[0])")
FAULT = ("if tfdist.rank == 1:\n    raise ValueError('benchmark fault')\n"
         "strategy.reduce('SUM', strategy.run(lambda: tf.constant(1.0)), axis=None)")


def value(result) -> str:
    return result.display["data"]["text/plain"]


def prepare(name: str, setup: str, fit: str, run_dir: str) -> dict:
    cluster = TFCluster.start(2)
    options = CellOptions(checkpoint=CheckpointPolicy(run_dir=run_dir, monitor="loss"))
    cluster.run(COUNT_EPOCHS + setup, want_display=False)
    began = time.perf_counter()
    cluster.run(fit, options=options, want_display=False)
    fit_seconds = time.perf_counter() - began
    state = value(cluster.run(STATE))
    print(f"{name:<11} trained in {fit_seconds:6.1f} s; state {state}", flush=True)
    return {"name": name, "cluster": cluster, "fit_seconds": fit_seconds, "state": state,
            "restore": [], "recover": []}


def one_round(job: dict) -> None:
    cluster = job["cluster"]
    began = time.perf_counter()
    try:
        cluster.run(FAULT, want_display=False)
        raise SystemExit(f"{job['name']}: the fault cell did not fail")
    except WorkerFailed as failure:
        if not failure.recovered or cluster.last_restore is None:
            raise SystemExit(f"{job['name']}: no restore happened: {failure}") from None
    recover = time.perf_counter() - began
    digest, steps, begun = ast.literal_eval(value(cluster.run(STATE)))
    trained_digest, trained_steps, _ = ast.literal_eval(job["state"])
    if (digest, steps, begun) != (trained_digest, trained_steps, 0):
        raise SystemExit(f"{job['name']}: after the restore: digest {digest[:12]}, step {steps}, "
                         f"{begun} epochs begun; trained: {trained_digest[:12]}, {trained_steps}")
    job["restore"].append(cluster.last_restore.seconds)
    job["recover"].append(recover)
    print(f"  {job['name']:<11} restore {cluster.last_restore.seconds:5.2f} s   failure -> "
          f"ready {recover:5.1f} s   [{cluster.last_restore.line()}]", flush=True)


def snapshot_overhead(cluster, rounds: int, steps: int) -> dict:
    """The same fit cell with and without the end-of-fit snapshot, alternated."""
    fit = CNN_FIT.format(epochs=3, steps=steps)
    times = {"snapshot": [], "none": []}
    for round_number in range(rounds):
        order = ["snapshot", "none"] if round_number % 2 == 0 else ["none", "snapshot"]
        for variant in order:
            cluster.restore_state = variant == "snapshot"
            began = time.perf_counter()
            cluster.run(fit, options=CellOptions(), want_display=False)
            times[variant].append(time.perf_counter() - began)
    cluster.restore_state = True
    print(f"  fit with snapshot {times['snapshot']}, without {times['none']}", flush=True)
    return times


def describe(values: list[float]) -> str:
    return (f"{statistics.median(values):6.2f} s [{min(values):.2f}-{max(values):.2f}] "
            f"n={len(values)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="restores per job (default 5)")
    parser.add_argument("--steps", type=int, default=20,
                        help="CNN steps per epoch (default 20; the tutorial uses 70)")
    parser.add_argument("--json", default=os.path.join(HERE, "results", "restore.json"))
    args = parser.parse_args()

    load = os.getloadavg()
    print(f"load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}", flush=True)
    root = tempfile.mkdtemp(prefix="tfmw-restore-bench-")
    jobs = []
    try:
        jobs.append(prepare("quickstart", QUICKSTART, QUICKSTART_FIT, f"{root}/quickstart"))
        jobs.append(prepare("cnn-3", CNN, CNN_FIT.format(epochs=3, steps=args.steps),
                            f"{root}/cnn-3"))
        jobs.append(prepare("cnn-30", CNN, CNN_FIT.format(epochs=30, steps=args.steps),
                            f"{root}/cnn-30"))
        for round_number in range(args.repeat):
            print(f"round {round_number + 1} of {args.repeat}", flush=True)
            order = jobs if round_number % 2 == 0 else list(reversed(jobs))
            for job in order:
                one_round(job)
        overhead = snapshot_overhead(jobs[1]["cluster"], args.repeat, args.steps)
    finally:
        for job in jobs:
            job["cluster"].stop()
    load = os.getloadavg()
    print(f"load average at end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print()
    print(row(TABLE, "job", "trained in", "restore (median [min-max])", "failure -> ready"))
    for job in jobs:
        print(row(TABLE, job["name"], f"{job['fit_seconds']:8.1f} s", describe(job["restore"]),
                  describe(job["recover"])))
    cnn3, cnn30 = jobs[1], jobs[2]
    ratio = statistics.median(cnn30["restore"]) / statistics.median(cnn3["restore"])
    print(f"restore cnn-30 / cnn-3: {ratio:.2f}x (10x the epochs)")
    with_snapshot, without = overhead["snapshot"], overhead["none"]
    print(f"cnn-3 fit cell, checkpoints off: with end-of-fit snapshot {describe(with_snapshot)}, "
          f"without {describe(without)}: "
          f"{statistics.median(with_snapshot) / statistics.median(without):.2f}x")
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as out:
        json.dump({"jobs": [{k: v for k, v in job.items() if k != "cluster"} for job in jobs],
                   "ratio_cnn30_cnn3": ratio, "steps_per_epoch": args.steps,
                   "snapshot_overhead": overhead,
                   "repeat": args.repeat}, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
