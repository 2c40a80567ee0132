"""`%%tfdist --resume-from` continues a fit exactly (issue 53), on a real 2-worker cluster.

A seeded fit of 5 epochs is trained as 2 (its automatic checkpoints in a run of its own),
the workers are restarted (`%tfdist restart`: fresh processes, as a new kernel's), and
the same fit called for 5 epochs under `--resume-from` (a run's name, or 'latest') ends
with the weights of the undisturbed 5-epoch fit, bit for bit (sha256 of every weight),
for a repeated shuffled pipeline with steps_per_epoch, a pipeline iterated anew (and
reshuffled) each epoch, and NumPy arrays shuffled by Keras, and with the call giving
`initial_epoch=2` (Keras' own way to resume); tf-keras (`tf.keras`) and Keras 3
(`import keras`). Before checkpoint_resume.py the resumed fit started its input
from the first batch: other weights.
"""


import pytest

from kernel_session import agreed_json, kernel_with_cluster

pytestmark = pytest.mark.timeout(400)

KINDS = ("dataset", "epochs", "arrays")
# (kind, the initial_epoch the resumed call gives: None, or the checkpoint's, as Keras'
# own way to resume); the last is resumed from 'latest'
CASES = (("dataset", None), ("epochs", None), ("dataset", 2), ("arrays", None))

SETUP = '''
import hashlib, json
import numpy as np
K = tf.keras if KERAS == 2 else __import__("keras")
rng = np.random.RandomState(0)
x = rng.uniform(0, 1, (1000, 8)).astype("float32")
y = (x @ rng.uniform(-1, 1, (8, 1))).astype("float32") + 5

def data(kind):
    if kind == "arrays":
        return dict(x=x, y=y, batch_size=64, shuffle=True)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(1000, seed=1)
    if kind == "dataset":
        return dict(x=ds.repeat().batch(64).map(lambda a, b: (a * 2, b)).prefetch(2),
                    steps_per_epoch=10)
    return dict(x=ds.batch(64))       # "epochs": iterated anew (and reshuffled) each epoch

def fit(kind, epochs, dropout=False, **call):
    K.utils.set_random_seed(1)
    model = K.Sequential([K.Input((8,)), K.layers.Dense(16, activation="relu")]
                         + [K.layers.Dropout(0.3)] * dropout + [K.layers.Dense(1)])
    model.compile(optimizer=K.optimizers.Adam(0.01), loss="mse")
    history = model.fit(**data(kind), epochs=epochs, verbose=0, **call)
    return json.dumps({"epochs": [int(e) for e in history.epoch],
                       "step": int(model.optimizer.iterations.numpy()),
                       "sha256": [hashlib.sha256(np.asarray(v.numpy()).tobytes()).hexdigest()
                                  for v in model.weights]})
'''


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    with kernel_with_cluster(str(tmp_path_factory.mktemp("resume-from"))) as session:
        yield session


@pytest.mark.parametrize("keras", [2, 3])
def test_a_fit_continued_by_resume_from_ends_with_the_undisturbed_weights(kernel, keras):
    setup = f"%%tfdist\nKERAS = {keras}\n" + SETUP
    kernel.ok(setup)
    kernel.ok(f"%%tfdist --no-checkpoint\nalone = {{k: fit(k, 5) for k in {KINDS!r}}}",
              timeout=300)
    alone = agreed_json(kernel, "alone")
    for number, (kind, _) in enumerate(CASES):
        kernel.ok(f"%%tfdist --name rf-{keras}-{number}\nfirst = fit({kind!r}, 2)",
                  timeout=120)
    kernel.ok("%tfdist restart", timeout=180)
    kernel.ok(setup)
    for number, (kind, initial_epoch) in enumerate(CASES):
        # the last run written is the latest; the others by their run's name
        spec = "latest" if number == len(CASES) - 1 else f"rf-{keras}-{number}"
        call = f", initial_epoch={initial_epoch}" if initial_epoch is not None else ""
        out = kernel.ok(f"%%tfdist --resume-from {spec}\nresumed = fit({kind!r}, 5{call})",
                        timeout=120)
        steps = alone[kind]["step"] // 5 * 2
        assert f"resumed from ckpt-000002: epoch 2, step {steps}; its input goes on where " \
               "it was" in out.stdout, out.stdout
        resumed = agreed_json(kernel, "resumed")
        assert resumed["epochs"] == [2, 3, 4], kind
        assert resumed["step"] == alone[kind]["step"], kind
        assert resumed["sha256"] == alone[kind]["sha256"], kind


@pytest.mark.parametrize("keras", [2, 3])
def test_a_model_with_dropout_continued_by_resume_from_draws_on(kernel, keras):
    """Its random layer's generator state is in the checkpoint (protocol/checkpoints.py's
    trackables): Keras 3's seed generator, tf-keras' tf.random.Generator (with
    enable_tf_random_generator()). Before, the resumed fit drew the masks of its first
    epochs again: other weights."""
    setup = (f"%%tfdist\nKERAS = {keras}\n" + SETUP
             + "\nif KERAS == 2:\n    K.backend.experimental.enable_tf_random_generator()")
    kernel.ok(setup)
    try:
        kernel.ok("%%tfdist --no-checkpoint\nalone = fit('dataset', 5, dropout=True)")
        alone = agreed_json(kernel, "alone")
        kernel.ok(f"%%tfdist --name rf-dropout-{keras}\nfirst = fit('dataset', 2, dropout=True)")
        kernel.ok("%tfdist restart", timeout=180)
        kernel.ok(setup)
        out = kernel.ok(f"%%tfdist --resume-from rf-dropout-{keras}\n"
                        "resumed = fit('dataset', 5, dropout=True)")
    finally:
        kernel.ok("%%tfdist\nif KERAS == 2:\n"
                  "    K.backend.experimental.disable_tf_random_generator()")
    assert "resumed from ckpt-000002: epoch 2, step 20" in out.stdout, out.stdout
    assert agreed_json(kernel, "resumed")["sha256"] == alone["sha256"]
