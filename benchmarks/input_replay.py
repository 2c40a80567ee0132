#!/usr/bin/env python
"""Exact resume's choice: replay a fresh input pipeline, or save its iterator's state.

One process, issue 53's probe pipeline (2000 rows, `shuffle(2000, seed=1).repeat()
.batch(64)`), 90 batches in: what `tf.train.Checkpoint(iterator=it).write` costs at each
backup (time and size: the shuffle buffer is saved whole), what replaying the 90 batches
costs once at a resume (worker/fits/input_position.py), and whether the iterator of a
MultiWorkerMirroredStrategy distributed dataset (what Keras' fit iterates) can be
checkpointed at all. Prints the figures; `--batches N` to move the backup.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=90)
    parser.add_argument("--writes", type=int, default=20)
    args = parser.parse_args()
    import numpy as np
    import tensorflow as tf

    rng = np.random.RandomState(0)
    x = rng.uniform(0, 1, (2000, 8)).astype("float32")
    dataset = tf.data.Dataset.from_tensor_slices((x, x[:, :1])).shuffle(2000, seed=1)
    dataset = dataset.repeat().batch(64)
    iterator = iter(dataset)
    for _ in range(args.batches):
        next(iterator)
    folder = tempfile.mkdtemp()
    checkpoint = tf.train.Checkpoint(iterator=iterator)
    began = time.perf_counter()
    for index in range(args.writes):
        checkpoint.write(os.path.join(folder, f"c{index}"))
    each = (time.perf_counter() - began) / args.writes
    size = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))
    print(f"iterator state saved at each backup: {each * 1000:.1f} ms, "
          f"{size / args.writes / 1024:.0f} KiB")
    began = time.perf_counter()
    replayed = iter(dataset)
    for _ in range(args.batches):
        next(replayed)
    print(f"replay at a resume, once: {args.batches} batches in "
          f"{(time.perf_counter() - began) * 1000:.1f} ms")
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    distributed = iter(strategy.experimental_distribute_dataset(dataset))
    next(distributed)
    try:
        tf.train.Checkpoint(iterator=distributed).write(os.path.join(folder, "distributed"))
        print("MultiWorkerMirroredStrategy's distributed iterator: checkpointed")
    except (TypeError, ValueError) as exc:
        print(f"MultiWorkerMirroredStrategy's distributed iterator: cannot be checkpointed "
              f"({type(exc).__name__}: {str(exc).split('.')[0]})")


if __name__ == "__main__":
    main()
