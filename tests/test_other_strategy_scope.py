"""A cell that enters another strategy's scope works as in one process.

Real 2-worker cluster (default start: tf.keras is tf-keras, `import keras` Keras 3). TensorFlow's
save-and-load tutorial: a model built and trained in the shared strategy's scope is saved, then
loaded under `tf.distribute.OneDeviceStrategy("/cpu:0").scope()` and trained there (each worker
on its own); a later cell still runs in the shared scope. Without
worker/corrections/other_strategy_scope.py
the loading cell fails with "Mixing different tf.distribute.Strategy objects".
"""

import pytest

from kernel_session import kernel_with_cluster, per_worker

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    with kernel_with_cluster(str(tmp_path_factory.mktemp("other-scope"))) as session:
        yield session


TRAIN_AND_SAVE = """\
%%tfdist
import numpy as np
import keras
x = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
y = x.sum(axis=1, keepdims=True)
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(16)
model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
model.fit(dataset, epochs=1, verbose=0)
model.save("tfk.keras")
model.save("tfk_savedmodel")                # tf-keras' SavedModel format
k3_model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
k3_model.compile(optimizer="sgd", loss="mse")
k3_model.fit(x, y, batch_size=16, epochs=1, verbose=0)
k3_model.save("k3.keras")
trained_in = [type(model.distribute_strategy).__name__, type(k3_model.weights[0].value).__name__]
"""

LOAD_UNDER_ANOTHER_STRATEGY = """\
%%tfdist
import math
another_strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
other = {}
with another_strategy.scope():
    other["current"] = tf.distribute.get_strategy() is another_strategy
    for path in ("tfk.keras", "tfk_savedmodel"):
        loaded = tf.keras.models.load_model(path)
        loss = loaded.fit(dataset, epochs=1, verbose=0).history["loss"][-1]
        other[path] = [loaded.distribute_strategy is another_strategy, math.isfinite(loss)]
    k3_loaded = keras.models.load_model("k3.keras")
    k3_loss = k3_loaded.fit(x, y, batch_size=16, epochs=1, verbose=0).history["loss"][-1]
    other["k3.keras"] = [type(k3_loaded.weights[0].value).__name__, math.isfinite(k3_loss)]
    served = tf.saved_model.load("tfk_savedmodel").signatures["serving_default"]
    other["served"] = [int(v.shape[0]) for v in served(tf.constant(x[:3])).values()]
other["after"] = tf.distribute.get_strategy() is strategy
"""

LATER_CELL = """\
%%tfdist
later = [tf.distribute.get_strategy() is strategy, type(tf.Variable(1.0)).__name__]
"""


def test_a_cell_loads_and_trains_under_another_strategy(kernel):
    kernel.ok(TRAIN_AND_SAVE, timeout=300)
    assert per_worker(kernel, "trained_in") == [
        ["CollectiveAllReduceStrategy", "MirroredVariable"]] * 2
    kernel.ok(LOAD_UNDER_ANOTHER_STRATEGY, timeout=300)
    # On each worker: the other strategy is the current one and the loaded models train under
    # it (Keras 3's variables hold plain ones there, not the shared strategy's mirrored ones).
    assert per_worker(kernel, "other") == [{
        "current": True, "tfk.keras": [True, True], "tfk_savedmodel": [True, True],
        "k3.keras": ["ResourceVariable", True], "served": [3], "after": True}] * 2


def test_a_later_cell_runs_in_the_shared_scope_again(kernel):
    kernel.ok(LATER_CELL, timeout=120)
    assert per_worker(kernel, "later") == [[True, "MirroredVariable"]] * 2
