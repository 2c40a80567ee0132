"""Custom training loops written for one process, run unchanged in `%%tfdist` cells on 2 real
workers (worker/corrections/cross_replica_steps.py, worker/corrections/loop_batches.py).

The three shapes single-process tutorials write: a tf-keras `@tf.function` step with
`tf.keras` losses, optimizer and metrics (TensorFlow's quickstart for experts); a Keras 3
step, eager and in a `tf.function` (keras.io's training loop from scratch); two models
trained against each other with two optimizers and tapes, checkpointed with
`tf.train.Checkpoint` every few epochs and restored (TensorFlow's DCGAN, dense and small:
its noise, `tf.random.normal([BATCH_SIZE, noise_dim])` under a global seed, is the same on
every worker and in one process, so each worker's half of the real images and the shared
fake ones average to one process's losses).
Each trains with identical weights on both workers, and its loss and weights match the same
code in one plain process (no strategy) within TOLERANCE, while each worker computed half of
every batch. Before the corrections each failed on its first step (tf-keras: "Please use
Reduction.SUM or NONE"; Keras 3: "DistributedVariable.handle is not available").
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from kernel_session import kernel_with_cluster, per_worker

pytestmark = pytest.mark.timeout(900)

# Measured (2 workers, TF 2.21, tf-keras 2.21, Keras 3.15.1): the workers' losses and weights
# equal one process's to 1e-7 relative; float32 sums over half batches, then averaged, round
# differently from sums over whole batches.
TOLERANCE = 1e-5

QUICKSTART = """\
import numpy as np
tf.keras.utils.set_random_seed(1)   # before the pipeline: its shuffle's seed depends on it
rng = np.random.default_rng(0)
x_train = rng.normal(size=(512, 8)).astype("float32")
y_train = (x_train.sum(1) > 0).astype("int64")
train_ds = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(512, seed=1).batch(32)

class MyModel(tf.keras.Model):
    def __init__(self):
        super().__init__()
        self.d1 = tf.keras.layers.Dense(16, activation="relu")
        self.d2 = tf.keras.layers.Dense(2)

    def call(self, x):
        return self.d2(self.d1(x))

model = MyModel()
loss_object = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
optimizer = tf.keras.optimizers.Adam()
train_loss = tf.keras.metrics.Mean(name="train_loss")
train_accuracy = tf.keras.metrics.SparseCategoricalAccuracy(name="train_accuracy")

@tf.function
def train_step(images, labels):
    with tf.GradientTape() as tape:
        predictions = model(images, training=True)
        loss = loss_object(labels, predictions)
    gradients = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(gradients, model.trainable_variables))
    train_loss(loss)
    train_accuracy(labels, predictions)

batch_rows = []
for epoch in range(3):
    train_loss.reset_state()
    train_accuracy.reset_state()
    for images, labels in train_ds:
        batch_rows.append(int(images.shape[0]))
        train_step(images, labels)
_out = {"loss": float(train_loss.result()), "accuracy": float(train_accuracy.result()),
        "rows": sum(batch_rows), "weights": [w.numpy().tolist() for w in model.weights]}
"""

KERAS3 = """\
import keras
import numpy as np
keras.utils.set_random_seed(1)
rng = np.random.default_rng(0)
x = rng.normal(size=(500, 8)).astype("float32")
y = (x.sum(1) > 0).astype("int32")
train_dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(512, seed=1).batch(32)
_out = {}
for compiled in (False, True):
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dense(2)])
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    optimizer = keras.optimizers.Adam(learning_rate=1e-2)
    train_acc_metric = keras.metrics.SparseCategoricalAccuracy()
    mean_loss = keras.metrics.Mean()

    def train_step(x, y):
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            loss_value = loss_fn(y, logits)
        grads = tape.gradient(loss_value, model.trainable_weights)
        optimizer.apply_gradients(zip(grads, model.trainable_weights))
        train_acc_metric.update_state(y, logits)
        mean_loss.update_state(loss_value)
        return loss_value

    step = tf.function(train_step) if compiled else train_step
    for epoch in range(2):
        for x_batch_train, y_batch_train in train_dataset:
            step(x_batch_train, y_batch_train)
    _out["tf.function" if compiled else "eager"] = {
        "loss": float(mean_loss.result()), "accuracy": float(train_acc_metric.result()),
        "weights": [w.numpy().tolist() for w in model.weights]}
"""

TWO_MODELS = """\
import os
import numpy as np
tf.keras.utils.set_random_seed(4)
rng = np.random.default_rng(3)
real = rng.normal(loc=2.0, size=(256, 4)).astype("float32")
BATCH_SIZE, noise_dim = 32, 3
train_dataset = tf.data.Dataset.from_tensor_slices(real).shuffle(256, seed=2).batch(BATCH_SIZE)
tf.keras.utils.set_random_seed(4)
generator = tf.keras.Sequential([tf.keras.layers.Dense(8, activation="relu"),
                                 tf.keras.layers.Dense(4)])
discriminator = tf.keras.Sequential([tf.keras.layers.Dense(8, activation="relu"),
                                     tf.keras.layers.Dense(1)])
generator.build((None, noise_dim))
discriminator.build((None, 4))
cross_entropy = tf.keras.losses.BinaryCrossentropy(from_logits=True)
generator_optimizer = tf.keras.optimizers.Adam(1e-3)
discriminator_optimizer = tf.keras.optimizers.Adam(1e-3)
checkpoint_dir = os.path.join(CKPT_ROOT, "training_checkpoints")
checkpoint_prefix = os.path.join(checkpoint_dir, "ckpt")
checkpoint = tf.train.Checkpoint(generator_optimizer=generator_optimizer,
                                 discriminator_optimizer=discriminator_optimizer,
                                 generator=generator, discriminator=discriminator)

@tf.function
def train_step(images):
    noise = tf.random.normal([BATCH_SIZE, noise_dim])
    with tf.GradientTape() as gen_tape, tf.GradientTape() as disc_tape:
        generated = generator(noise, training=True)
        real_output = discriminator(images, training=True)
        fake_output = discriminator(generated, training=True)
        gen_loss = cross_entropy(tf.ones_like(fake_output), fake_output)
        disc_loss = (cross_entropy(tf.ones_like(real_output), real_output)
                     + cross_entropy(tf.zeros_like(fake_output), fake_output))
    gradients_of_generator = gen_tape.gradient(gen_loss, generator.trainable_variables)
    gradients_of_discriminator = disc_tape.gradient(disc_loss,
                                                    discriminator.trainable_variables)
    generator_optimizer.apply_gradients(zip(gradients_of_generator,
                                            generator.trainable_variables))
    discriminator_optimizer.apply_gradients(zip(gradients_of_discriminator,
                                                discriminator.trainable_variables))
    return gen_loss, disc_loss

for epoch in range(4):
    for image_batch in train_dataset:
        gen_loss, disc_loss = train_step(image_batch)
    if (epoch + 1) % 2 == 0:
        checkpoint.save(file_prefix=checkpoint_prefix)
trained = [w.numpy().tolist() for w in generator.weights + discriminator.weights]
for w in generator.weights:
    w.assign(tf.zeros_like(w))
checkpoint.restore(tf.train.latest_checkpoint(checkpoint_dir))
restored = [w.numpy().tolist() for w in generator.weights + discriminator.weights]
_out = {"restored_equal": restored == trained, "weights": trained,
        "checkpoints": sorted(n for n in os.listdir(checkpoint_dir) if n.endswith(".index"))}
"""


def in_one_process(code: str, tmp_path, keras2: bool = True) -> dict:
    """`code` run in a plain Python process with no strategy: its `_out`."""
    script = ("import json, tensorflow as tf\n" + code
              + "\nprint('OUT=' + json.dumps(_out))\n")
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="-1", TF_CPP_MIN_LOG_LEVEL="2",
               TF_USE_LEGACY_KERAS="1" if keras2 else "0")
    done = subprocess.run([sys.executable, "-c", script], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    line = [line for line in done.stdout.splitlines() if line.startswith("OUT=")][-1]
    return json.loads(line[len("OUT="):])


def assert_close(ours, theirs, where):
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(np.asarray(a, float), np.asarray(b, float),
                                   rtol=TOLERANCE, atol=TOLERANCE, err_msg=where)


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    with kernel_with_cluster(str(tmp_path_factory.mktemp("loops"))) as session:
        yield session


def run_cell(kernel, code: str) -> tuple[list[dict], str]:
    out = kernel.ok("%%tfdist --no-dashboard --no-checkpoint\n" + code, timeout=600)
    return per_worker(kernel, "_out"), out.stdout + out.stderr


def test_tf_keras_step_in_a_tf_function_trains_split_as_one_process(kernel, tmp_path):
    """Each worker takes 16 of every 32 rows; the averaged steps are one process's steps."""
    workers, text = run_cell(kernel, QUICKSTART)
    alone = in_one_process(QUICKSTART, tmp_path)
    first, second = workers
    assert first["weights"] == second["weights"]
    assert first["rows"] == second["rows"] == alone["rows"] // 2 == 3 * 256
    assert first["loss"] == second["loss"]   # a metric's result sums the workers' parts
    np.testing.assert_allclose(first["loss"], alone["loss"], rtol=TOLERANCE)
    np.testing.assert_allclose(first["accuracy"], alone["accuracy"], rtol=TOLERANCE)
    assert_close(first["weights"], alone["weights"], "weights")
    assert "computed every batch" not in text


def test_keras3_step_eager_and_in_a_tf_function_trains_as_one_process(kernel, tmp_path):
    workers, _ = run_cell(kernel, KERAS3)
    alone = in_one_process(KERAS3, tmp_path, keras2=False)
    first, second = workers
    for mode in ("eager", "tf.function"):
        assert first[mode]["weights"] == second[mode]["weights"], mode
        assert first[mode]["loss"] == second[mode]["loss"], mode
        np.testing.assert_allclose(first[mode]["loss"], alone[mode]["loss"], rtol=TOLERANCE)
        np.testing.assert_allclose(first[mode]["accuracy"], alone[mode]["accuracy"],
                                   rtol=TOLERANCE)
        assert_close(first[mode]["weights"], alone[mode]["weights"], mode)


def test_two_models_two_optimizers_checkpointed_and_restored(kernel, tmp_path):
    """The GAN shape: both models identical on both workers and equal to one process's, the
    chief's checkpoints every 2 epochs, and a restore gives the trained weights back."""
    root = os.path.join(kernel.cwd, "gan")
    kernel.ok(f"%%tfdist\nCKPT_ROOT = {root!r}")
    workers, _ = run_cell(kernel, TWO_MODELS)
    alone = in_one_process(f"CKPT_ROOT = {str(tmp_path)!r}\n" + TWO_MODELS, tmp_path)
    first, second = workers
    assert first["weights"] == second["weights"]
    assert first["restored_equal"] and second["restored_equal"]
    assert first["checkpoints"] == ["ckpt-1.index", "ckpt-2.index"]
    assert_close(first["weights"], alone["weights"], "generator and discriminator")


def test_batches_the_cell_does_not_iterate_itself_are_left_whole(kernel):
    """Only the cell's own loop over a batched pipeline is split: a pipeline of single
    examples and library iteration keep every row."""
    code = """\
import numpy as np
x = np.arange(40, dtype="float32").reshape(20, 2)
batched_rows = [int(b.shape[0]) for b in tf.data.Dataset.from_tensor_slices(x).batch(8)]
single_rows = sum(1 for _ in tf.data.Dataset.from_tensor_slices(x))
library_rows = len(list(tf.data.Dataset.from_tensor_slices(x).batch(8).as_numpy_iterator()))
_out = {"batched": batched_rows, "single": single_rows, "library": library_rows}
"""
    workers, text = run_cell(kernel, code)
    first, second = workers
    assert "shuffles without a seed" not in text
    assert first["batched"] == second["batched"] == [4, 4, 2]
    assert first["single"] == second["single"] == 20
    assert first["library"] == second["library"] == 3


def test_a_step_over_whole_batches_trains_in_step_and_says_so_once(kernel):
    """NumPy rows are no pipeline to split: every worker computes each step whole, the
    weights stay identical, and one line (from the chief) names how to split them."""
    code = """\
import numpy as np
x = np.arange(40, dtype="float32").reshape(20, 2) / 40
w = tf.Variable(1.0)
for row in x:
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean((w * row) ** 2)
    w.assign_sub(0.1 * tape.gradient(loss, w))
_out = {"w": float(w.numpy())}
"""
    workers, text = run_cell(kernel, code)
    first, second = workers
    assert first["w"] == second["w"] < 1.0
    assert text.count("computed every batch on each of the 2 workers") == 1, text


def test_a_legacy_optimizer_outside_strategy_run_names_the_change(kernel):
    """tf-keras' legacy optimizers refuse to apply in cross-replica context; the error keeps
    TensorFlow's line and the notebook adds the one that says what to change."""
    code = """\
x = tf.random.stateless_normal([16, 4], seed=(1, 2))
model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
model.build((None, 4))
legacy = tf.keras.optimizers.legacy.SGD(0.1)
with tf.GradientTape() as tape:
    loss = tf.reduce_mean(model(x) ** 2)
legacy.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                           model.trainable_variables))
"""
    out = kernel.execute("%%tfdist --no-dashboard --no-checkpoint\n" + code, timeout=300)
    text = out.error_text
    assert "cannot be called in cross-replica context" in text, text
    assert "use the optimizer without `.legacy`" in text, text


def test_splitting_a_pipeline_shuffled_with_no_seed_says_so_once(kernel):
    code = """\
import numpy as np
x = np.arange(64, dtype="float32").reshape(32, 2)
tf.random.set_seed(None)   # an earlier cell set the global seed
pipeline = tf.data.Dataset.from_tensor_slices(x).shuffle(32).batch(8)
for epoch in range(2):
    for batch in pipeline:
        pass
_out = {}
"""
    _, text = run_cell(kernel, code)
    assert text.count("shuffles without a seed") == 1, text


def test_checkpoints_of_a_loop_across_cells_on_every_worker(kernel):
    """TensorFlow's checkpoint guide across cells: a CheckpointManager made in one cell saves
    in the next, into that cell's copies on worker 1 (it wrote under the first cell's removed
    copies directory, made again and never removed; where the temp directory is not the
    worker's own, as in the corpus, its state file's write failed), a restore made in one cell
    is completed in a later one (deferred), `int(ckpt.step)` counts, and an iterator saved
    with the checkpoint resumes on each worker at its own rows."""
    root = os.path.join(kernel.cwd, "across")
    cells = [
        f"import os\nroot = {root!r}\n"
        "pipeline = tf.data.Dataset.range(8).repeat().batch(2)\n"
        "iterator = iter(pipeline)\n"
        "ckpt = tf.train.Checkpoint(step=tf.Variable(1), value=tf.Variable(1.0),"
        " iterator=iterator)\n"
        "manager = tf.train.CheckpointManager(ckpt, os.path.join(root, 'ckpts'), max_to_keep=2)",
        "first = [next(iterator).numpy().tolist() for _ in range(3)]\n"
        "ckpt.value.assign(5.0)\n"
        "ckpt.step.assign_add(2)\n"
        "saved = manager.save()\n"
        "after = next(iterator).numpy().tolist()",
        "restore = tf.train.Checkpoint(iterator=iter(pipeline))\n"
        "status = restore.restore(manager.latest_checkpoint)",
        "restore.value = tf.Variable(0.0)\n"
        "_out = {'first': first, 'after': after, 'step': int(ckpt.step),"
        " 'restored': float(restore.value),"
        " 'resumed': next(restore.iterator).numpy().tolist()}",
    ]
    for cell in cells:
        kernel.ok("%%tfdist --no-dashboard --no-checkpoint\n" + cell, timeout=300)
    # Worker 1's copies of what the cells saved went with each cell's end: none is left.
    kernel.ok("%%tfdist --no-dashboard --no-checkpoint\nimport tempfile\n"
              "_left = [n for n in os.listdir(tempfile.gettempdir())"
              " if n.startswith('tfmw-chief-writes-')]")
    assert per_worker(kernel, "_left") == [[], []]
    first, second = per_worker(kernel, "_out")
    assert first["first"] == [[0], [2], [4]] and second["first"] == [[1], [3], [5]]
    for worker, out in ((0, first), (1, second)):
        assert out["step"] == 3 and out["restored"] == 5.0, (worker, out)
        assert out["resumed"] == out["after"], (worker, out)


def test_keras3_batch_normalization_keeps_one_moving_mean_on_every_worker(kernel):
    """Each worker normalizes its half of a batch by that half's statistics (as fit does);
    the moving statistics they write are averaged, so they stay the same on both workers
    (each wrote its own half's before)."""
    code = """\
import keras
import numpy as np
keras.utils.set_random_seed(1)
x = np.random.default_rng(0).normal(size=(256, 8)).astype("float32")
y = (x.sum(1) > 0).astype("int32")
ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(32)
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16),
                          keras.layers.BatchNormalization(), keras.layers.Dense(2)])
optimizer = keras.optimizers.Adam(1e-2)
loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

@tf.function
def train_step(xb, yb):
    with tf.GradientTape() as tape:
        loss = loss_fn(yb, model(xb, training=True))
    grads = tape.gradient(loss, model.trainable_weights)
    optimizer.apply_gradients(zip(grads, model.trainable_weights))

for xb, yb in ds:
    train_step(xb, yb)
_out = {"weights": [w.tolist() for w in model.get_weights()],
        "moving_mean": model.layers[1].moving_mean.numpy().tolist()}
"""
    (first, second), _ = run_cell(kernel, code)
    assert first["moving_mean"] == second["moving_mean"]
    assert any(value != 0.0 for value in first["moving_mean"])
    assert first["weights"] == second["weights"]
