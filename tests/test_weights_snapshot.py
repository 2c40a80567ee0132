"""A checkpoint read now and written later (worker/writes/weights_snapshot.py), with real
TensorFlow in a process of its own per Keras: training and assignments after the read
do not reach the file, and `tf.train.Checkpoint.read` restores it; a fit's later
snapshots, read without gathering again, hold their own moment's values."""

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.timeout(240)

PROGRAM = r'''
import os, sys, tempfile
import numpy as np
import tensorflow as tf
from tfmw_notebook.protocol.checkpoints import trackables
from tfmw_notebook.worker.writes import weights_snapshot

keras = tf.keras
strategy = tf.distribute.MirroredStrategy(["/cpu:0"]) if sys.argv[1] == "mirrored" \
    else tf.distribute.get_strategy()
with strategy.scope():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8),
                              keras.layers.BatchNormalization(), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.Adam(0.1), loss="mse")
x = np.random.default_rng(0).random((64, 4)).astype("float32")
y = x.sum(axis=1, keepdims=True)
model.fit(x, y, epochs=1, verbose=0)
read = [w.copy() for w in model.get_weights()]
steps = int(model.optimizer.iterations.numpy())
taker = weights_snapshot.SnapshotTaker()   # a fit's saves: gathered once, then read
snapshot = taker.take(model)
assert snapshot is not None, "this TensorFlow has the saver's parts: no fallback expected"
model.fit(x, y, epochs=2, verbose=0)   # the optimizer updates the variables in place
for variable in model.weights:
    if "float" in str(variable.dtype):
        variable.assign(variable + 1.0)
changed = model.get_weights()
assert all(not np.array_equal(a, b) for a, b in zip(read, changed) if a.size)
prefix = os.path.join(tempfile.mkdtemp(), "weights")
snapshot.write(prefix)
tf.train.Checkpoint(**trackables(model)).read(prefix).expect_partial()
assert all(np.array_equal(a, b) for a, b in zip(read, model.get_weights())), "not the snapshot"
assert int(model.optimizer.iterations.numpy()) == steps

# Taken again by the same taker (no gathering): the values of that later moment.
for variable in model.weights:
    if "float" in str(variable.dtype):
        variable.assign(variable * 2.0 + 0.5)
later = [w.copy() for w in model.get_weights()]
again = taker.take(model)
assert taker.reused == 1, taker.reused
for variable in model.weights:
    if "float" in str(variable.dtype):
        variable.assign(variable - 3.0)
prefix = os.path.join(tempfile.mkdtemp(), "weights")
again.write(prefix)
tf.train.Checkpoint(**trackables(model)).read(prefix).expect_partial()
assert all(np.array_equal(a, b) for a, b in zip(later, model.get_weights())), "not the later one"

# Another model (other variables): gathered anew, its own values.
with strategy.scope():
    other = keras.models.clone_model(model)
    other.compile(optimizer=keras.optimizers.Adam(0.1), loss="mse")
other.fit(x, y, epochs=1, verbose=0)
others = [w.copy() for w in other.get_weights()]
third = taker.take(other)
assert taker.reused == 1, "the other model's variables were read through the first's"
prefix = os.path.join(tempfile.mkdtemp(), "weights")
third.write(prefix)
other.fit(x, y, epochs=1, verbose=0)
tf.train.Checkpoint(**trackables(other)).read(prefix).expect_partial()
assert all(np.array_equal(a, b) for a, b in zip(others, other.get_weights())), "not the other"
flavour = 2 if "tf_keras" in type(model).__module__ else 3
print("SNAPSHOT OK", "Keras", flavour, len(read), "weights")
'''


@pytest.mark.parametrize("keras", ["3", "2"])
@pytest.mark.parametrize("strategy", ["default", "mirrored"])
def test_the_file_holds_the_values_of_the_moment_they_were_read(tmp_path, keras, strategy):
    if keras == "2":
        pytest.importorskip("tf_keras")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="-1")
    env.pop("TF_USE_LEGACY_KERAS", None)
    if keras == "2":
        env["TF_USE_LEGACY_KERAS"] = "1"
    script = tmp_path / "snapshot_program.py"
    script.write_text(PROGRAM)
    done = subprocess.run([sys.executable, str(script), strategy], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=200)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert "SNAPSHOT OK" in done.stdout
    assert f"Keras {keras} " in done.stdout, done.stdout
