#!/usr/bin/env python
"""Whether `%tfdist diagnose`'s parts add up to the step it measures, round after round.

`cluster.diagnose()` times a step whole, then each of its parts on its own (the all-reduce,
the input, the computation); the parts' sum is meant to be the step. Each is a timing, so
how close they come depends on what else the machine runs: on a loaded 2-core machine the
sum fell to 0.55x and 0.74x of the step (tests/test_diagnose.py judged it within 25% and
failed there), which is why the judgement lives here and not in the suite.

Two jobs on one warm 2-worker cluster (tests/test_diagnose.py's): a tiny model with a small
batch (communication-bound) and a wide model with a large batch (compute-bound). Per job,
`--rounds` diagnoses; printed: each worker's parts/step ratio, median [min-max], and the
verdicts seen. Run it beside `python -c "while True: pass"` to see the spread under load.
"""

from __future__ import annotations

import argparse
import collections
import statistics
import tempfile

SETUP = """\
import numpy as np

def job(width, batch):
    rng = np.random.RandomState(0)
    x = rng.uniform(0, 1, (4096, 32)).astype("float32")
    y = rng.uniform(0, 1, (4096, 1)).astype("float32")
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch).repeat()
    model = tf.keras.Sequential([tf.keras.layers.Input((32,))] +
                                [tf.keras.layers.Dense(width, activation="relu")
                                 for _ in range(3)] + [tf.keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    return model, data
"""
JOBS = {"tiny (16 units, batch 16)": (16, 16, 5), "wide (512 units, batch 2048)": (512, 2048, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    from tfmw_notebook import TFCluster

    with tempfile.TemporaryDirectory(), TFCluster.start(2) as cluster:
        cluster.run(SETUP)
        for name, (width, batch, steps) in JOBS.items():
            ratios: dict[int, list[float]] = collections.defaultdict(list)
            verdicts: collections.Counter[str] = collections.Counter()
            cluster.run(f"model, data = job({width}, {batch})\n"
                        f"model.fit(data, epochs=1, steps_per_epoch={steps}, verbose=0)",
                        max_restarts=0)
            for _ in range(args.rounds):
                diagnosis = cluster.diagnose(steps=10)
                verdicts[diagnosis.verdict().split(":")[0]] += 1
                for worker in diagnosis.workers:
                    ratios[worker.rank].append(worker.parts_total / worker.step)
            print(f"{name}, {args.rounds} rounds: verdicts {dict(verdicts)}")
            for rank, values in sorted(ratios.items()):
                print(f"  worker {rank}: parts/step {statistics.median(values):.2f} "
                      f"[{min(values):.2f}-{max(values):.2f}]")


if __name__ == "__main__":
    main()
