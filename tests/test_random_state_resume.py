"""Exact resume of a model that draws random numbers while it trains (Dropout), on real
2-worker clusters: worker 1 killed at step 25 under `--max-restarts --backup-every 10`.

Keras 3's Dropout draws from a SeedGenerator whose state is a variable of the model but
not one of its weights, so the backup's `.weights.h5` left it out: the resumed fit drew
the masks of steps 1-5 again at steps 21-25 and ended with other weights.
random_state_backup.py backs it up beside the weights and gives it back. tf-keras'
Dropout draws, by default, from stateful random ops whose state lives in the op kernels,
where no checkpoint can reach it: the resume says so in one line and names the way to a
bit-identical resume (`enable_tf_random_generator()`: tf.random.Generators, whose state
is backed up as Keras 3's), which the last test takes.
"""


import pytest

from kernel_session import agreed_json, kernel_with_cluster

pytestmark = pytest.mark.timeout(600)

SETUP = '''
import os, signal, hashlib, json
import numpy as np
rng = np.random.RandomState(0)
x = rng.uniform(0, 1, (1000, 8)).astype("float32")
y = (x @ rng.uniform(-1, 1, (8, 1))).astype("float32") + 5

def fit(K, kill_at, marks):
    class Kill(K.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            marker = os.path.join(marks, "killed")
            if (int(self.model.optimizer.iterations.numpy()) == kill_at
                    and tfdist.rank == 1 and not os.path.exists(marker)):
                open(marker, "w").close()
                os.kill(os.getpid(), signal.SIGKILL)
    K.utils.set_random_seed(1)
    model = K.Sequential([K.Input((8,)), K.layers.Dense(32, activation="relu"),
                          K.layers.Dropout(0.3), K.layers.Dense(16, activation="relu"),
                          K.layers.Dropout(0.2), K.layers.Dense(1)])
    model.compile(optimizer=K.optimizers.Adam(0.01), loss="mse")
    data = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(1000, seed=1).repeat().batch(64)
    history = model.fit(data, steps_per_epoch=10, epochs=5, verbose=0, callbacks=[Kill()])
    return json.dumps({"loss": history.history["loss"][-1],
                       "step": int(model.optimizer.iterations.numpy()),
                       "sha256": [hashlib.sha256(np.asarray(v.numpy()).tobytes()).hexdigest()
                                  for v in model.weights]})
'''


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    with kernel_with_cluster(str(tmp_path_factory.mktemp("random-kernel"))) as session:
        session.ok("%%tfdist\n" + SETUP)
        yield session


def trained(kernel, tmp_path, keras: str, kill_at: int | None):
    """The fit's result (the workers agree) and the cell's output; `keras` is the
    expression the cell uses for the Keras module."""
    marks = tmp_path / f"marks-{kill_at}"
    marks.mkdir()
    cell = (f"%%tfdist --max-restarts 2 --backup-every 10 --checkpoint-dir {tmp_path / 'run'}\n"
            f"result = fit({keras}, {kill_at or -1}, {str(marks)!r})")
    out = kernel.execute(cell, timeout=400)
    assert out.status == "ok", out.error_text + out.stderr
    chief = agreed_json(kernel, "result")
    return chief, out


def test_keras3_dropout_resumes_with_its_seed_generators_state(kernel, tmp_path):
    undisturbed, _ = trained(kernel, tmp_path, "__import__('keras')", None)
    resumed, out = trained(kernel, tmp_path, "__import__('keras')", 25)
    assert "restart 1 of 2" in out.stderr, out.stderr
    assert "resumed from the automatic backup: epoch 3, step 20" in out.stdout, out.stdout
    assert resumed["sha256"] == undisturbed["sha256"]
    assert resumed["loss"] == undisturbed["loss"]
    assert "its random state given back (2 random generators)" in out.stdout, out.stdout


def test_tf_keras_dropout_resume_says_its_draws_start_anew(kernel, tmp_path):
    _, out = trained(kernel, tmp_path, "tf.keras", 25)
    assert "resumed from the automatic backup: epoch 3, step 20" in out.stdout, out.stdout
    assert ("its 2 random layers (Dropout) draw anew: tf-keras keeps their state "
            "in its stateful random ops, which no backup holds; "
            "tf.keras.backend.experimental.enable_tf_random_generator() before building the "
            "model makes it resumable") in out.stdout, out.stdout


def test_tf_keras_dropout_with_tf_random_generators_resumes_exactly(kernel, tmp_path):
    kernel.ok("%%tfdist\ntf.keras.backend.experimental.enable_tf_random_generator()")
    try:
        undisturbed, _ = trained(kernel, tmp_path, "tf.keras", None)
        resumed, out = trained(kernel, tmp_path, "tf.keras", 25)
    finally:
        kernel.ok("%%tfdist\ntf.keras.backend.experimental.disable_tf_random_generator()")
    assert "resumed from the automatic backup: epoch 3, step 20" in out.stdout, out.stdout
    assert resumed["sha256"] == undisturbed["sha256"]
    assert "its random state given back (2 random generators)" in out.stdout, out.stdout
