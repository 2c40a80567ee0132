"""The support matrix's fixed smoke, run by tests/matrix/run.py in one virtualenv per row
(skipped in the suite itself, whose virtualenv is the current row).

On one 2-worker cluster of the row's versions (the default start: `tf.keras` is tf-keras,
`import keras` Keras 3): the start, the seed tutorial's code (TensorFlow's multi-worker
tutorial, its fit and its custom loop) with identical losses on both workers, then a Keras 3
fit with automatic checkpoints in which worker 1 is killed: the cluster restarts, the fit
resumes from its backup, ends with identical weights on both workers and every epoch's
checkpoint, and a checkpoint restores on every worker. The row's other parts (the quickstart
notebook, three corpus programs) are tests of their own, chosen by run.py.
"""

import json
import os

import pytest

from kernel_session import kernel_with_cluster
from seed_code import CUSTOM_LOOP, MAIN, MNIST_SETUP

ROW_VARIABLE = "TFMW_MATRIX_ROW"

pytestmark = [
    pytest.mark.timeout(600),
    pytest.mark.skipif(not os.environ.get(ROW_VARIABLE),
                       reason="the support matrix's smoke: tests/matrix/run.py runs it in each "
                              "row's virtualenv"),
]

VERSIONS = """\
import json, sys, tensorflow as tf, keras, tf_keras, numpy, IPython, ipyparallel
print(json.dumps({"python": sys.version.split()[0], "tensorflow": tf.__version__,
                  "keras": keras.__version__, "tf_keras": tf_keras.__version__,
                  "numpy": numpy.__version__, "ipython": IPython.__version__,
                  "ipyparallel": ipyparallel.__version__}))
"""

KERAS3_SETUP = """\
import os, signal, hashlib
import numpy as np
import keras
x = np.random.RandomState(0).uniform(0, 1, (256, 4)).astype("float32")
y = x.sum(axis=1, keepdims=True)
train = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).repeat()
keras.utils.set_random_seed(1)
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(16, activation="relu"),
                          keras.layers.Dense(1)])
model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")

class KillRank1(keras.callbacks.Callback):
    # Kills worker 1 once, as epoch KILL_AT begins (a marker file says it happened).
    def on_epoch_begin(self, epoch, logs=None):
        if tfdist.rank == 1 and epoch == KILL_AT and not os.path.exists(MARKER):
            open(MARKER, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)

def digest(weights):
    return hashlib.sha256(b"".join(w.tobytes() for w in weights)).hexdigest()
"""

EPOCHS, STEPS = 4, 6


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    with kernel_with_cluster(str(tmp_path_factory.mktemp("matrix"))) as session:
        yield session


def per_worker(kernel, name):
    out = kernel.ok("import json\nfrom tfmw_notebook import active_cluster as _c\n"
                    f"print(json.dumps([_c().pull([{name!r}], rank=r)[{name!r}]"
                    " for r in range(_c().size)]))")
    return json.loads(out.stdout.strip().splitlines()[-1])


def skipped_corrections(kernel):
    """Each worker's corrections skipped so far (worker/common/guarded_patches.py): a row where a
    correction's target is missing or changed is not supported as it is."""
    kernel.ok("%%tfdist\nfrom tfmw_notebook.worker.common import guarded_patches as _guarded\n"
              "_skipped = [skip.describe() for skip in _guarded.skipped()]")
    return per_worker(kernel, "_skipped")


def test_the_workers_run_the_rows_versions_with_every_correction(kernel):
    """The start line names TensorFlow and tf-keras; the versions go into the row's log."""
    assert "tf-keras 2." in kernel.start_line, kernel.start_line
    out = kernel.ok("%%tfdist\n" + VERSIONS, timeout=120)
    versions = json.loads(out.stdout.strip().splitlines()[-1].split("] ", 1)[-1])
    print("ROW VERSIONS", json.dumps(versions))
    assert versions["tensorflow"].split(".")[0] == "2"
    assert skipped_corrections(kernel) == [[], []]


def test_the_seed_tutorials_code_trains_with_identical_losses(kernel):
    kernel.ok("%%tfdist\n" + MNIST_SETUP)
    out = kernel.ok("%%tfdist\n" + MAIN, timeout=300)
    assert out.stdout.startswith("3 epochs · "), out.stdout    # the dashboard's summary
    losses = per_worker(kernel, "losses")
    assert len(losses[0]) == 3 and losses[0] == losses[1] and losses[0][-1] < losses[0][0]
    kernel.ok("%%tfdist\n" + CUSTOM_LOOP, timeout=300)
    losses = per_worker(kernel, "ctl_losses")
    assert losses[0] == losses[1] and losses[0][-1] < losses[0][0], losses


def test_a_keras3_fit_checkpoints_survives_a_killed_worker_and_restores(kernel, tmp_path):
    run_dir, marker = str(tmp_path / "run"), str(tmp_path / "killed")
    kernel.ok(f"%%tfdist\nKILL_AT = 2\nMARKER = {marker!r}\n" + KERAS3_SETUP, timeout=120)
    out = kernel.execute(
        f"%%tfdist --max-restarts 1 --checkpoint-dir {run_dir}\n"
        f"model.fit(train, epochs={EPOCHS}, steps_per_epoch={STEPS}, callbacks=[KillRank1()])\n"
        "trained = digest(model.get_weights())", timeout=400)
    assert out.status == "ok", out.error_text + out.stderr
    assert os.path.exists(marker) and "restart 1 of 1" in out.stderr, out.stderr
    assert "resumed from the automatic backup: epoch 3" in out.stdout, out.stdout
    assert f"{EPOCHS} epochs · " in out.stdout, out.stdout          # the dashboard's summary
    trained = per_worker(kernel, "trained")
    assert trained[0] == trained[1], trained
    names = sorted(n for n in os.listdir(run_dir) if n.startswith("ckpt-"))
    assert names == [f"ckpt-{e:06d}" for e in range(1, EPOCHS + 1)], names
    # A fresh model, then the last checkpoint restored on every worker: the trained weights.
    kernel.ok("%%tfdist\nkeras.utils.set_random_seed(2)\n"
              "model = keras.models.clone_model(model)")
    last = os.path.join(run_dir, f"ckpt-{EPOCHS:06d}")
    restored = kernel.ok("from tfmw_notebook import active_cluster\n"
                         f"print(active_cluster().restore_checkpoint({last!r}, 'model'))")
    digests = json.loads(restored.stdout.strip().splitlines()[-1].replace("'", '"'))
    assert len(set(digests)) == 1, digests
    kernel.ok("%%tfdist\nnow = digest(model.get_weights())")
    assert per_worker(kernel, "now") == trained
    assert skipped_corrections(kernel) == [[], []]     # Keras 3's callbacks' ones included
