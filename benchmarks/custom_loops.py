#!/usr/bin/env python
"""What a custom training loop written for one process costs each worker, split or not.

One loop (a tf-keras `@tf.function` step: GradientTape, Adam, a Mean metric; a 784-W-W-10
dense model, W = `--width`, or with `--model conv` two convolutions on 32x32x3 images;
batches of `--batch` rows from a `tf.data` pipeline over in-memory arrays) runs in
turns, on one warm 2-worker cluster and in one plain process beside it:

- `one process`: the loop in a plain Python process, no strategy;
- `split`: the same cell on 2 workers; each worker takes its half of every batch
  (worker/corrections/loop_batches.py) and the gradients are averaged
  (worker/corrections/cross_replica_steps.py);
- `whole`: the same cell, the pipeline read through `as_numpy_iterator()` (library
  iteration, which is never split): every worker computes every batch.

Per step, each side's CPU seconds (the process's own, so the two workers sharing 2 cores do
not count each other's time) and wall seconds; the medians over `--turns` turns, and the
ratios against one process. On 2 cores the two workers share the machine: their wall time
says little about a machine with a core each, their CPU time does.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

STEPS = 40

LOOP = """\
import time
import numpy as np
tf.keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
x = rng.normal(size=({rows}, *{shape})).astype("float32")
y = rng.integers(0, 10, size={rows}).astype("int64")
train_ds = tf.data.Dataset.from_tensor_slices((x, y)).batch({batch})
model = tf.keras.Sequential({layers})
model.build((None, *{shape}))
loss_object = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
optimizer = tf.keras.optimizers.Adam()
train_loss = tf.keras.metrics.Mean()

@tf.function
def train_step(images, labels):
    with tf.GradientTape() as tape:
        loss = loss_object(labels, model(images, training=True))
    gradients = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(gradients, model.trainable_variables))
    train_loss(loss)

def one_epoch(batches):
    for images, labels in batches:
        train_step(images, labels)

one_epoch(train_ds.take(2))          # traced before the clock starts
cpu, wall = time.process_time(), time.perf_counter()
one_epoch({batches})
bench_out = {{"cpu": (time.process_time() - cpu) / {steps},
             "wall": (time.perf_counter() - wall) / {steps}}}
"""


# Dense: many parameters for its compute (the all-reduce weighs); conv: few (compute weighs).
MODELS = {
    "dense": ((784,), "[tf.keras.layers.Dense({width}, activation='relu'), "
                      "tf.keras.layers.Dense({width}, activation='relu'), "
                      "tf.keras.layers.Dense(10)]"),
    "conv": ((32, 32, 3), "[tf.keras.layers.Conv2D({width} // 16, 3, activation='relu'), "
                          "tf.keras.layers.Conv2D({width} // 8, 3, activation='relu'), "
                          "tf.keras.layers.GlobalAveragePooling2D(), tf.keras.layers.Dense(10)]"),
}


def loop(whole: bool, width: int, batch: int, model: str = "dense") -> str:
    batches = "train_ds.as_numpy_iterator()" if whole else "train_ds"
    shape, layers = MODELS[model]
    return LOOP.format(rows=batch * STEPS, steps=STEPS, batches=batches, batch=batch,
                       shape=shape, layers=layers.format(width=width))


def one_process(width: int, batch: int, model: str) -> dict[str, float]:
    script = ("import json, tensorflow as tf\n" + loop(False, width, batch, model)
              + "print('OUT=' + json.dumps(bench_out))\n")
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="-1", TF_CPP_MIN_LOG_LEVEL="2",
               TF_USE_LEGACY_KERAS="1")
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=600, check=True)
    line = [line for line in done.stdout.splitlines() if line.startswith("OUT=")][-1]
    return json.loads(line[4:])


def on_workers(cluster, whole: bool, width: int, batch: int,
               model: str) -> list[dict[str, float]]:
    cluster.run(loop(whole, width, batch, model))
    return [cluster.pull(["bench_out"], rank=rank)["bench_out"] for rank in range(cluster.size)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--width", type=int, default=1024, help="units of the hidden layers")
    parser.add_argument("--batch", type=int, default=512, help="rows of a global batch")
    parser.add_argument("--model", choices=sorted(MODELS), default="dense")
    args = parser.parse_args()
    from tfmw_notebook import TFCluster

    sides: dict[str, list[dict[str, float]]] = {"one process": [], "split": [], "whole": []}
    with tempfile.TemporaryDirectory() as directory:
        os.chdir(directory)
        with TFCluster.start(2) as cluster:
            for turn in range(args.turns):
                sides["one process"].append(one_process(args.width, args.batch, args.model))
                for name, whole in (("split", False), ("whole", True)):
                    results = on_workers(cluster, whole, args.width, args.batch, args.model)
                    # A worker's cost: the busier of the two.
                    sides[name].append({key: max(r[key] for r in results)
                                        for key in ("cpu", "wall")})
                print(f"turn {turn + 1}/{args.turns} done", file=sys.stderr, flush=True)
    base = {key: statistics.median(t[key] for t in sides["one process"]) for key in ("cpu", "wall")}
    print(f"{'side':<12} {'CPU ms/step':>12} {'x one process':>14} {'wall ms/step':>13} "
          f"{'x one process':>14}   (medians of {args.turns} turns, 2 workers, {STEPS} steps "
          f"of {args.batch} rows, {args.model} width {args.width})")
    for name, turns in sides.items():
        cpu = statistics.median(t["cpu"] for t in turns)
        wall = statistics.median(t["wall"] for t in turns)
        print(f"{name:<12} {cpu * 1e3:>12.1f} {cpu / base['cpu']:>13.2f}x "
              f"{wall * 1e3:>13.1f} {wall / base['wall']:>13.2f}x")


if __name__ == "__main__":
    main()
