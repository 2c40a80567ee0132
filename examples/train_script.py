"""Multi-worker training from a plain Python script, without a notebook.

Starts two TensorFlow workers on this machine, trains a small Keras model on generated
data on both (MultiWorkerMirroredStrategy), prints the chief's Keras history and the
metrics the workers reported, and stops them:

    python examples/train_script.py

`cluster.run(fn, *args, **kwargs)` calls `fn` on every worker, inside the shared
strategy's scope (as a `%%tfdist` cell runs), and returns the chief's return value. The
function's global names are looked up in the workers' namespace (`tf`, `strategy`,
`tfdist` and what earlier runs defined are there): it imports what else it needs. Return
plain data (numbers, arrays, `history.history`), not a model: a model cannot leave its
worker.
"""

from __future__ import annotations

import json

from tfmw_notebook import TFCluster


def train(epochs: int, steps_per_epoch: int = 8, batch_size: int = 32) -> dict:
    """Fit a linear regression on generated data; return the Keras history."""
    import numpy as np
    import tensorflow as tf

    x = np.random.RandomState(0).uniform(-1, 1, (512, 4)).astype("float32")
    y = x @ np.array([[1.0], [-2.0], [3.0], [0.5]], dtype="float32")
    data = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(batch_size)
    model = tf.keras.Sequential([tf.keras.Input(shape=(4,)),
                                 tf.keras.layers.Dense(1)])
    model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="mse")
    history = model.fit(data, epochs=epochs, steps_per_epoch=steps_per_epoch, verbose=0)
    return history.history


def main() -> None:
    with TFCluster.start(2) as cluster:     # stopped when the block ends, also on errors
        print(cluster.describe())
        chief = cluster.run(train, 3, steps_per_epoch=8)
        print("chief's history:", json.dumps({k: [round(v, 4) for v in vs]
                                               for k, vs in chief.items()}))
        metrics = cluster.history()         # what `%tfdist history` shows in a notebook
        print("workers:", metrics.ranks, "summary:", metrics.summary()["final"])


if __name__ == "__main__":
    main()
