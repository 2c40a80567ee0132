"""A tf.data pipeline defined once and fitted in two cells, the second fit killed: after
the restart its resumed fit ends with the undisturbed run's weights, bit for bit.

The pipeline reshuffles each time it is iterated and each time its `repeat()` begins a
repetition, drawing from a seed generator the dataset holds, so the second fit reads
other orders than the first. The restart re-creates the pipeline with its generator at
its start and the replayed first fit restores its weights without reading it: before
input_orders.py the resumed second fit read the first fit's orders and ended with other
weights. Real 2-worker clusters; the default workers run both Keras.
"""

import re

import pytest

from kernel_session import agreed_json, kernel_with_cluster

pytestmark = pytest.mark.timeout(900)

SETUP = '''
import os, signal, hashlib, json
import numpy as np
K = tf.keras if KERAS == 2 else __import__("keras")
K.utils.set_random_seed(1)
rng = np.random.RandomState(0)
x = rng.uniform(0, 1, (ROWS, 8)).astype("float32")
y = (x @ rng.uniform(-1, 1, (8, 1))).astype("float32") + 5
train = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(ROWS, seed=0).batch(64).repeat()
val = tf.data.Dataset.from_tensor_slices((x[:128], y[:128])).shuffle(128, seed=2).batch(64)
model = K.Sequential([K.Input((8,)), K.layers.Dense(16, activation="relu"), K.layers.Dense(1)])
model.compile(optimizer=K.optimizers.Adam(0.01), loss="mse")

class Kill(K.callbacks.Callback):
    """SIGKILL to rank 1 once, at optimizer step KILL (a marker file)."""
    def on_train_batch_end(self, batch, logs=None):
        step = int(self.model.optimizer.iterations.numpy())
        marker = os.path.join(MARKS, "killed")
        if step == KILL and tfdist.rank == 1 and not os.path.exists(marker):
            open(marker, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)

def digest(history):
    return json.dumps({"loss": history.history["loss"][-1],
                       "step": int(model.optimizer.iterations.numpy()),
                       "sha256": [hashlib.sha256(np.asarray(v.numpy()).tobytes()).hexdigest()
                                  for v in model.weights]})
'''


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    with kernel_with_cluster(str(tmp_path_factory.mktemp("shared-kernel"))) as session:
        yield session


def two_fits(kernel, tmp_path, *, keras, rows, steps, kill):
    """The second fit's result on every worker (they agree) and its cell's output: on
    `rows` rows (repetitions of 16 batches) each fit reads 5 epochs of `steps` batches,
    rank 1 killed at the second's optimizer step `kill` (None: undisturbed)."""
    marks = tmp_path / f"marks-{keras}-{kill}"
    marks.mkdir()
    kernel.ok(f"%%tfdist\nKERAS = {keras}\nKILL = {kill}\nROWS = {rows}\n"
              f"MARKS = {str(marks)!r}\n" + SETUP)
    fit = f"model.fit(train, epochs=5, steps_per_epoch={steps}, validation_data=val, verbose=0"
    kernel.ok(f"%%tfdist\nfirst = digest({fit}))", timeout=300)
    out = kernel.execute(f"%%tfdist --max-restarts 1 --backup-every 10 --checkpoint-dir "
                         f"{tmp_path / f'run-{keras}-{kill}'}\n"
                         f"second = digest({fit}, callbacks=[Kill()]))", timeout=500)
    assert out.status == "ok", out.error_text + out.stderr
    chief = agreed_json(kernel, "second")
    return chief, out


@pytest.mark.parametrize("keras, rows, steps", [
    (2, 1000, 10), (3, 1000, 10),
    (2, 1024, 16)])   # the checkpoints tutorial's: the first fit ends a repetition
def test_a_fit_resumed_after_a_fit_on_the_same_pipeline_ends_with_the_undisturbed_weights(
        kernel, tmp_path, keras, rows, steps):
    shape = dict(keras=keras, rows=rows, steps=steps)
    undisturbed, _ = two_fits(kernel, tmp_path, kill=None, **shape)
    resumed, out = two_fits(kernel, tmp_path, kill=5 * steps + 25, **shape)
    assert "restart 1 of 1" in out.stderr, out.stderr
    assert "its input goes on where it was" in out.stdout, out.stdout
    assert resumed["step"] == undisturbed["step"] == 10 * steps
    assert resumed["sha256"] == undisturbed["sha256"]
    assert resumed["loss"] == undisturbed["loss"]
    # the replayed first fits drew their orders again: undisturbed and before the kill
    assert re.search(r"; [1-9]\d* iterators made and [1-9]\d* batches read for the "
                     r"shuffle orders of the fits before it", out.stdout), out.stdout


def test_the_draws_counted_in_a_fit_given_back_to_a_fresh_pipeline_give_its_next_orders():
    """In this process, without Keras: a 'fit' makes an iterator over a shared repeated
    pipeline and reads 96 batches (6 repetitions of 16: tf.data's read-ahead begins a
    7th), then 50 (3 and 2 batches); a finite pipeline is iterated 3 times. The counts
    given back to fresh pipelines make their next iterators read what the originals'
    do; without them the orders differ."""
    import numpy as np
    import tensorflow as tf
    from tfmw_notebook.worker.fits import input_orders

    input_orders.install()
    rows = np.arange(1024 * 2, dtype="float32").reshape(1024, 2)

    def pipeline(repeat=True):
        data = tf.data.Dataset.from_tensor_slices(rows).shuffle(1024, seed=0).batch(64)
        return data.repeat().prefetch(2) if repeat else data

    def first_batch(data):
        return next(iter(data)).numpy().tolist()

    model = type("Model", (), {})()
    model.optimizer = type("Optimizer", (), {"iterations": tf.Variable(0, dtype=tf.int64)})()
    for repeat, reads in ((True, [96]), (True, [50]), (False, [16, 16, 16])):
        shared = pipeline(repeat)
        with input_orders.counting(model, {"x": shared, "validation_data": None}):
            for batches in reads:
                iterator = iter(shared)
                for _ in range(batches):
                    next(iterator)
                model.optimizer.iterations.assign_add(batches)
        counts = input_orders.last_counts()
        assert counts["x"]["iterators"] == len(reads), counts
        fresh, untouched = pipeline(repeat), pipeline(repeat)
        input_orders.give_back({"x": fresh}, counts)
        expected = first_batch(shared)
        assert first_batch(fresh) == expected, (repeat, reads)
        assert first_batch(untouched) != expected, (repeat, reads)
    drawn, problem = input_orders.take_report()
    # 1 + 1 + 3 iterators; 96 + 1 and 50 + 1 batches (the read-ahead), none of a finite one
    assert problem == "" and "; 5 iterators made and 148 batches read" in drawn, drawn
