"""Keras 3 on the workers: as `tf.keras` too (`--keras 3`), and as `import keras` beside
tf-keras (`--keras 2`, the default).

Real 2-worker clusters: code written as keras.io teaches trains with identical weights on
both workers, the same weights one process gets on the global batch; saving from every
worker leaves the chief's files only; a loaded SavedModel's signature is called in a cell.
"""

import json

import pytest

from keras3_cells import KEEP_WEIGHTS, digests, without_correction
from kernel_session import kernel_with_cluster

pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def keras3(tmp_path_factory):
    with kernel_with_cluster(str(tmp_path_factory.mktemp("keras3")), flags="--keras 3") as s:
        yield s


@pytest.fixture(scope="module")
def keras2(tmp_path_factory):
    """Workers where tf.keras is tf-keras and `import keras` Keras 3 (`--keras 2`, the
    default start)."""
    with kernel_with_cluster(str(tmp_path_factory.mktemp("keras2")), flags="--keras 2") as s:
        yield s


DATA = """\
import numpy as np
rng = np.random.default_rng(0)
x = rng.normal(size=(256, 8)).astype("float32")
y = (x @ rng.normal(size=(8, 1))).astype("float32")
labels = (y[:, 0] > 0).astype("int32")
"""

MODEL = """\
import keras
keras.utils.set_random_seed(1)
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                          keras.layers.Dense(1)])
model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse", metrics=["mae"])
"""

def test_the_start_line_says_which_keras(keras3, keras2, tf_kernel):
    assert "Keras 3." in keras3.start_line, keras3.start_line
    assert "tf-keras 2." in tf_kernel.start_line, tf_kernel.start_line   # the default
    assert "tf-keras 2." in keras2.start_line, keras2.start_line
    out = keras3.ok("%%tfdist\nimport keras\n"
                    "print(keras.__version__.split('.')[0], tf.keras.Model is keras.Model)")
    assert "[worker 0] 3 True" in out.stdout or out.stdout.strip().endswith("3 True"), out.stdout


def test_code_as_keras_io_teaches_trains_with_identical_weights(keras3):
    out = keras3.ok("%%tfdist --no-dashboard --no-checkpoint\n" + DATA + MODEL +
                    "h = model.fit(x, y, batch_size=64, epochs=3, validation_data=(x[:64], y[:64]),"
                    " verbose=0)\n"
                    "print('losses', [round(v, 4) for v in h.history['loss']])\n"
                    "print('eval', round(model.evaluate(x, y, verbose=0)[0], 4))\n"
                    "print('predict', model.predict(x[:8], verbose=0).shape)\n" + KEEP_WEIGHTS,
                    timeout=300)
    losses = json.loads(out.stdout.split("losses", 1)[1].splitlines()[0].replace("'", '"'))
    assert losses[-1] < losses[0], out.stdout
    assert "predict (8, 1)" in out.stdout, out.stdout
    first, second = digests(keras3)
    assert first == second


def test_dict_inputs_class_weight_and_steps_per_epoch(keras3):
    keras3.ok("%%tfdist --no-dashboard --no-checkpoint\n" + DATA +
              "import keras\n"
              "a, b = keras.Input((4,), name='a'), keras.Input((4,), name='b')\n"
              "out = keras.layers.Dense(2)(keras.layers.Concatenate()([a, b]))\n"
              "model = keras.Model({'a': a, 'b': b}, out)\n"
              "model.compile(optimizer='adam', loss=keras.losses.SparseCategoricalCrossentropy("
              "from_logits=True))\n"
              "ds = tf.data.Dataset.from_tensor_slices(({'a': x[:, :4], 'b': x[:, 4:]}, labels))"
              ".repeat().batch(64)\n"
              "model.fit(ds, epochs=2, steps_per_epoch=3, class_weight={0: 1.0, 1: 2.0}, "
              "verbose=0)\n" + KEEP_WEIGHTS, timeout=300)
    first, second = digests(keras3)
    assert first == second


def test_a_custom_loop_with_keras_ops_and_a_gradient_tape(keras3):
    keras3.ok("%%tfdist --no-dashboard\n" + DATA +
              "import keras\n"
              "class Scale(keras.layers.Layer):\n"
              "    def build(self, shape):\n"
              "        self.w = self.add_weight(shape=(shape[-1],), initializer='ones')\n"
              "    def call(self, inputs):\n"
              "        return keras.ops.multiply(inputs, self.w)\n"
              "model = keras.Sequential([keras.Input((8,)), Scale(), keras.layers.Dense(1)])\n"
              "optimizer = keras.optimizers.Adam(0.01)\n"
              "ds = strategy.experimental_distribute_dataset(\n"
              "    tf.data.Dataset.from_tensor_slices((x, y)).batch(64))\n"
              "@tf.function\n"
              "def step(batch):\n"
              "    def replica(xs, ys):\n"
              "        with tf.GradientTape() as tape:\n"
              "            loss = tf.reduce_sum(keras.ops.square(model(xs) - ys)) / 64.0\n"
              "        grads = tape.gradient(loss, model.trainable_variables)\n"
              "        optimizer.apply_gradients(zip(grads, model.trainable_variables))\n"
              "        return loss\n"
              "    return strategy.reduce('SUM', strategy.run(replica, args=batch), axis=None)\n"
              "for batch in ds:\n"
              "    step(batch)\n" + KEEP_WEIGHTS, timeout=300)
    first, second = digests(keras3)
    assert first == second


# Same data, same starting weights, plain SGD: the weights after STEPS steps.
NUMERICS = """\
import numpy as np
rng = np.random.default_rng(3)
xs = rng.normal(size=(64 * 4, 8)).astype("float32")
ys = (xs @ rng.normal(size=(8, 1))).astype("float32")
start = [rng.normal(size=(8, 4)).astype("float32") * 0.3, np.zeros(4, "float32"),
         rng.normal(size=(4, 1)).astype("float32") * 0.3, np.zeros(1, "float32")]
model = {keras}.Sequential([{keras}.Input((8,)), {keras}.layers.Dense(4, activation="tanh"),
                            {keras}.layers.Dense(1)])
model.set_weights(start)
model.compile(optimizer={keras}.optimizers.SGD(0.1), loss="mse")
model.fit(xs, ys, batch_size=64, epochs=2, shuffle=False, verbose=0)
_weights = [w for w in model.get_weights()]
"""
TOLERANCE = 1e-5


def test_weights_agree_with_one_process_and_with_tf_keras(keras3, keras2):
    """(a) Keras 3 on 2 workers, (b) Keras 3 in one process on the global batch, (c) tf-keras
    on 2 workers: after 8 SGD steps the weights agree within TOLERANCE (float32 sums in
    another order), and both workers of each cluster hold identical weights."""
    keras3.ok("%%tfdist --no-dashboard --no-checkpoint\nimport keras\n"
              + NUMERICS.format(keras="keras"), timeout=300)
    keras2.ok("%%tfdist --no-dashboard --no-checkpoint\n" + NUMERICS.format(keras="tf.keras"),
                 timeout=300)
    assert len(set(digests(keras3))) == 1 and len(set(digests(keras2))) == 1
    compare = ("import numpy as np, keras, json\nfrom tfmw_notebook import active_cluster\n"
               "_w = active_cluster().pull(['_weights'])['_weights']\n"
               "print(json.dumps([w.tolist() for w in _w]))")
    on_keras3 = json.loads(keras3.ok(compare).stdout.strip().splitlines()[-1])
    on_tf_keras = json.loads(keras2.ok(compare).stdout.strip().splitlines()[-1])
    alone = keras3.ok("import os\nos.environ['CUDA_VISIBLE_DEVICES'] = '-1'\n"
                      "import tensorflow as tf, keras, json\n"
                      + NUMERICS.format(keras="keras")
                      + "print(json.dumps([w.tolist() for w in _weights]))", timeout=300)
    in_one = json.loads(alone.stdout.strip().splitlines()[-1])
    import numpy as np

    for a, b, c in zip(on_keras3, in_one, on_tf_keras):
        np.testing.assert_allclose(a, b, atol=TOLERANCE, rtol=TOLERANCE)
        np.testing.assert_allclose(a, c, atol=TOLERANCE, rtol=TOLERANCE)
    assert not np.allclose(on_keras3[0], np.asarray(in_one[0]) + 1e-2)  # the check can fail


@pytest.mark.parametrize("workers", ["keras3", "keras2"])
def test_the_dashboard_and_automatic_checkpoints_see_keras3_fits(workers, request):
    """`import keras` models, where tf.keras is Keras 3 and where it is tf-keras (the
    default start): the dashboard's summary, the history and the automatic checkpoints."""
    kernel = request.getfixturevalue(workers)
    fitted = kernel.ok(f"%%tfdist --checkpoint-dir runs/{workers}\n" + DATA + MODEL +
                       "model.fit(x, y, batch_size=64, epochs=2, verbose=0)", timeout=300)
    assert fitted.stdout.startswith("2 epochs · "), fitted.stdout   # the dashboard's summary
    out = kernel.ok("h = %tfdist history\nprint(len(h.merged_history()['loss']))\n"
                    "import tfmw_notebook\n"
                    f"print([c.epoch for c in tfmw_notebook.list_checkpoints('runs/{workers}')])")
    lines = out.stdout.strip().splitlines()
    assert lines[-2] == "2" and lines[-1] == "[1, 2]", out.stdout


def test_saving_from_every_worker_leaves_the_chiefs_files(keras3):
    out = keras3.ok("%%tfdist --no-dashboard --no-checkpoint\n" + DATA + MODEL +
                    "import os\n"
                    "saver = keras.callbacks.ModelCheckpoint('k3ck/e{epoch}.weights.h5',"
                    " save_weights_only=True)\n"
                    "model.fit(x, y, batch_size=64, epochs=2, verbose=0, callbacks=[saver])\n"
                    "model.save('k3model.keras')\n"
                    "model.save_weights('k3.weights.h5')\n"
                    "model.load_weights('k3.weights.h5')\n"
                    "again = keras.saving.load_model('k3model.keras')\n"
                    "print('saved', sorted(os.listdir('k3ck')))", timeout=300)
    assert "saved ['e1.weights.h5', 'e2.weights.h5']" in out.stdout, out.stdout


LOADED_SIGNATURE = """\
loaded = tf.saved_model.load({path!r})
inputs = tf.constant(x[:4])
signed = list(loaded.signatures['serving_default'](inputs).values())[0]
print('shape', signed.shape, 'as the model', bool(np.allclose(signed, model(inputs))))
"""


def test_a_loaded_savedmodel_is_called_in_the_scope(keras3):
    """Inside the strategy's scope TensorFlow raised "Trying to access a placeholder that is
    not supposed to be executed" for this call (worker/corrections/saved_model_calls.py)."""
    keras3.ok("%%tfdist --no-dashboard --no-checkpoint\n" + DATA + MODEL +
              "model.fit(x, y, batch_size=64, epochs=1, verbose=0)\n"
              "model.export('k3export')", timeout=300)
    out = keras3.ok("%%tfdist\n" + LOADED_SIGNATURE.format(path="k3export") +
                    "served = loaded.serve(inputs)\n"
                    "print('serve', bool(np.allclose(served, model(inputs))))", timeout=300)
    assert "shape (4, 1) as the model True" in out.stdout, out.stdout
    assert "serve True" in out.stdout, out.stdout
    out = keras3.ok("%%tfdist --no-scope\n" + LOADED_SIGNATURE.format(path="k3export"),
                    timeout=300)
    assert "shape (4, 1) as the model True" in out.stdout, out.stdout


def test_a_tf_keras_savedmodel_is_called_in_the_scope(keras2):
    """TensorFlow's save-and-load tutorial: tf-keras saves a directory, tf.saved_model loads
    it, the signature is called in the cell."""
    keras2.ok("%%tfdist --no-dashboard --no-checkpoint\n" + DATA +
              "model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(1)])\n"
              "model.compile(optimizer='sgd', loss='mse')\n"
              "model.fit(x, y, batch_size=64, epochs=1, verbose=0)\n"
              "model.save('k2saved')", timeout=300)
    out = keras2.ok("%%tfdist\n" + LOADED_SIGNATURE.format(path="k2saved"), timeout=300)
    assert "shape (4, 1) as the model True" in out.stdout, out.stdout


def test_import_keras_trains_on_tf_keras_workers_too(keras2):
    keras2.ok("%%tfdist --no-dashboard --no-checkpoint\n" + DATA + MODEL +
                 "model.fit(x, y, batch_size=64, epochs=1, verbose=0)\n" + KEEP_WEIGHTS,
                 timeout=300)
    first, second = digests(keras2)
    assert first == second


def test_tensorboard_keeps_the_chiefs_logs_only(keras3, keras2):
    """Keras 3's TensorBoard callback, where tf.keras is Keras 3 and where it is tf-keras:
    one events file per run directory, the chief's."""
    for kernel, where in ((keras3, "tb-keras3"), (keras2, "tb-keras2")):
        out = kernel.ok("%%tfdist --no-dashboard --no-checkpoint\n" + DATA + MODEL +
                        f"board = keras.callbacks.TensorBoard(log_dir={where!r})\n"
                        "model.fit(x, y, batch_size=64, epochs=2, verbose=0, callbacks=[board])\n"
                        "import os\n"
                        f"print('events', len(os.listdir(os.path.join({where!r}, 'train'))))",
                        timeout=300)
        assert "events 1" in out.stdout, (where, out.stdout)


def test_mixing_the_two_kerases_is_named_in_one_line(keras2):
    out = keras2.execute("%%tfdist\nimport keras\nmodel = keras.Sequential("
                            "[keras.Input((8,)), tf.keras.layers.Dense(1)])", timeout=120)
    assert out.status == "error"
    assert "This cell mixes Keras 3 (`import keras`) with tf-keras" in out.error_text, \
        out.error_text


BATCH_NORM_FIT = """\
import keras
from keras.src.layers.normalization import batch_normalization as _bn
_corrected = _bn.BatchNormalization.add_weight
if not {corrected}:   # as Keras 3 ships it, for the comparison
    _bn.BatchNormalization.add_weight = _corrected.__wrapped__
try:
    class Custom(keras.Model):
        def train_step(self, data):
            x, y = data
            with tf.GradientTape() as tape:
                y_pred = self(x, training=True)
                loss = self.compute_loss(x=x, y=y, y_pred=y_pred)
            self.optimizer.apply(tape.gradient(loss, self.trainable_variables),
                                 self.trainable_variables)
            for metric in self.metrics:
                if metric.name == "loss":
                    metric.update_state(loss)
                else:
                    metric.update_state(y, y_pred)
            return {{m.name: m.result() for m in self.metrics}}

    keras.utils.set_random_seed(1)
    inputs = keras.Input((8,))
    hidden = keras.layers.BatchNormalization()(keras.layers.Dense(16, activation="relu")(inputs))
    model = Custom(inputs, keras.layers.Dense(1)(hidden))
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse", metrics=["mae"])
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(32)
    h = model.fit(data, epochs=4, validation_data=data.take(2), verbose=0, callbacks=[
        keras.callbacks.EarlyStopping(monitor="val_loss", patience=2),
        keras.callbacks.ReduceLROnPlateau(monitor="val_loss", patience=1)])
finally:
    _bn.BatchNormalization.add_weight = _corrected
print("epochs", len(h.history["loss"]), "learning_rate" in h.history)
""" + KEEP_WEIGHTS


def test_batch_norm_statistics_agree_with_the_correction_only(keras3):
    """A custom train_step with BatchNormalization, EarlyStopping and ReduceLROnPlateau:
    with Keras 3 as shipped each worker keeps its own moving statistics (its own shard's);
    with the correction (mean_moving_statistics) both workers hold the same weights."""
    for corrected in (False, True):
        out = keras3.ok("%%tfdist --no-dashboard --no-checkpoint\n" + DATA
                        + BATCH_NORM_FIT.format(corrected=corrected), timeout=300)
        assert "epochs 4 True" in out.stdout, out.stdout
        first, second = digests(keras3)
        assert (first == second) is corrected, (corrected, first, second)


MIXED_PRECISION_FIT = """\
import keras
keras.mixed_precision.set_global_policy("mixed_float16")
try:
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dense(1, dtype="float32")])
    model.compile(optimizer=keras.optimizers.SGD(1e-4), loss="mse")
    # Each worker reads its own data (no sharding); worker 1's is large enough that its
    # loss-scaled gradients overflow float16 where worker 0's do not.
    scale = 1.0 if tfdist.rank == 0 else 200.0
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    data = tf.data.Dataset.from_tensor_slices((x * scale, y * scale)).batch(32).repeat()
    model.fit(data.with_options(options), epochs=2, steps_per_epoch=10, verbose=0)
finally:
    keras.mixed_precision.set_global_policy("float32")
print("scale", float(model.optimizer.dynamic_scale.numpy()))
""" + KEEP_WEIGHTS


def test_mixed_precision_workers_skip_or_apply_each_step_together(keras3):
    """mixed_float16 on two workers whose gradients overflow on one only: with the correction
    (agree_on_finite_grads) both skip the same steps and hold the same weights; as Keras 3
    ships it the worker that applies a step waits for the other in its all-reduce forever."""
    out = keras3.ok("%%tfdist --no-dashboard --no-checkpoint --all-output --timeout 120\n"
                    + DATA + MIXED_PRECISION_FIT, timeout=300)
    scales = sorted(line.split("scale ", 1)[1] for line in out.stdout.splitlines()
                    if "scale " in line)
    assert len(scales) == 2 and scales[0] == scales[1], out.stdout
    assert float(scales[0]) < 2.0 ** 15, scales   # some steps were skipped, by both
    first, second = digests(keras3)
    assert first == second


PLAIN_FIT = """\
keras.utils.set_random_seed(1)
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse", metrics=["mae"])
model.fit(x, y, batch_size=64, epochs=1, verbose=0)
"""


@pytest.mark.parametrize("owner, name, correction, failure", [
    ("_kc.trainer_class()", "_maybe_symbolic_build", "build_from_local_batch",
     "Attempt to convert a value"),
    ("_trainer", "reduce_per_replica", "mean_logs_across_workers",
     "Invalid reduction dimension 0"),
])
def test_each_fit_correction_is_needed(keras3, owner, name, correction, failure):
    """Without build_from_local_batch, or without mean_logs_across_workers (the others
    kept), Keras 3's fit fails on 2 workers as upstream's does; test_code_as_keras_io_teaches...
    shows it trains with both."""
    out = keras3.execute("%%tfdist --no-dashboard --no-checkpoint\n" + DATA
                         + without_correction(owner, name, correction, PLAIN_FIT), timeout=300)
    assert out.status == "error", out.stdout
    assert failure in out.error_text + out.stderr, out.error_text
    keras3.ok("%%tfdist\nprint(tfdist.rank)")   # the workers were brought back


def test_tf_keras_fits_are_recorded_as_runs_too(keras2):
    """The chief's part of a run record (tests/test_runs_live.py does Keras 3), with tf-keras
    and without the dashboard."""
    # tf.keras: on these workers `import keras` is Keras 3, whose fits are not the workers'
    keras2.ok("%%tfdist --no-dashboard --name k2-run\n" + DATA
              + MODEL.replace("import keras\n", "keras = tf.keras\n")
              + "model.fit(x, y, batch_size=64, epochs=2, verbose=0)", timeout=300)
    with open(f"{keras2.cwd}/tfdist_checkpoints/k2-run/run.json") as file:
        record = json.load(file)
    params = record["hyperparameters"]
    assert (params["optimizer"], params["loss"], params["batch_size"]) == ("SGD", "mse", 64)
    assert params["learning_rate"] == pytest.approx(0.05) and params["parameters"] == 161
    assert sorted(record["history"]) == ["loss", "mae"] and record["epochs"] == [0, 1]
    assert record["outcome"] == "completed" and record["samples_per_second"] > 0
    assert record["cluster"]["keras"].startswith("tf-keras")


API_SWEEP = '''\
import json
from tfmw_notebook import RunSettings, active_cluster
_c = active_cluster()
_body = """
model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(8, activation="relu"),
                             tf.keras.layers.Dense(1)])
model.compile(optimizer=tf.keras.optimizers.SGD(lr), loss="mse")
epochs_run = len(model.fit(x, y, batch_size=16, epochs=3, steps_per_epoch=4,
                           verbose=0).history["loss"])
"""
_result = _c.sweep(_body, {"lr": [0.01, 0.02, 50.0]}, prune="median", monitor="loss",
                   settings=RunSettings(want_display=False))
print(json.dumps({"records": _result.records(),
                  "epochs_run": [_c.pull(["epochs_run"], rank=r)["epochs_run"]
                                 for r in range(_c.size)]}))
'''


def test_a_sweep_prunes_on_tf_keras_workers_through_the_python_api(keras2):
    keras2.ok("%%tfdist --no-dashboard --no-checkpoint\n" + DATA)
    found = json.loads(keras2.ok(API_SWEEP, timeout=240).stdout.strip().splitlines()[-1])
    records = found["records"]
    assert [r["outcome"] for r in records] == ["completed", "completed", "pruned"]
    assert [len(r["history"]) for r in records] == [3, 3, 1]
    assert records[2]["pruned_at"] == 1
    assert found["epochs_run"] == [1, 1]   # the last trial stopped on every worker
