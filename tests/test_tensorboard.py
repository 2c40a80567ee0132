"""TensorBoard in %%tfdist cells: the chief's logs only, `--tensorboard`, and
`%tfdist tensorboard` showing them inline with a server that ends with the cluster.

Real 2-worker cluster, real kernel, real TensorBoard server.
"""

import glob
import json
import os
import time
import urllib.request

import pytest

from kernel_session import kernel_with_cluster

pytestmark = pytest.mark.timeout(420)

SETUP = '''
import os, tempfile
import numpy as np

rng = np.random.RandomState(0)
x = rng.uniform(0, 1, (256, 8)).astype("float32")
y = rng.uniform(0, 1, (256, 1)).astype("float32")
train = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).repeat()

def build():
    model = tf.keras.Sequential([tf.keras.layers.Input((8,)), tf.keras.layers.Dense(4),
                                 tf.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    return model

class SeenInLogDir(tf.keras.callbacks.Callback):
    """What the log directory holds at each epoch's end, while training runs."""
    def __init__(self, log_dir):
        super().__init__()
        self.log_dir, self.seen = log_dir, []
    def on_epoch_end(self, epoch, logs=None):
        self.seen.append(sorted(os.listdir(self.log_dir)))
'''

# As in TensorFlow's distributed Keras tutorial: a TensorBoard callback in the fit.
TUTORIAL_FIT = '''
board = tf.keras.callbacks.TensorBoard(log_dir={logs!r})
seen = SeenInLogDir({logs!r})
model = build()
model.fit(train, epochs=3, steps_per_epoch=4, callbacks=[board, seen])
print("SEEN", json.dumps({{"rank": tfdist.rank, "seen": seen.seen,
      "log_dir": board.log_dir,
      "temp_left": glob.glob(os.path.join(tempfile.gettempdir(), "tfmw-tensorboard-*"))}}))
'''


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    with kernel_with_cluster(str(tmp_path_factory.mktemp("tensorboard-kernel"))) as session:
        session.ok("%%tfdist\nimport glob, json\n" + SETUP)
        yield session


def event_files(directory):
    return sorted(os.path.relpath(path, directory) for path in
                  glob.glob(os.path.join(directory, "**", "*tfevents*"), recursive=True))


def test_the_tutorials_callback_leaves_event_files_only_in_the_chiefs_log_dir(kernel, tmp_path):
    logs = str(tmp_path / "logs")
    out = kernel.ok("%%tfdist --all-output\n" + TUTORIAL_FIT.format(logs=logs), timeout=240)
    rows = {row["rank"]: row for row in (json.loads(line.split("SEEN ", 1)[1])
                                         for line in out.stdout.splitlines() if "SEEN " in line)}
    assert set(rows) == {0, 1}, out.stdout
    # The chief's run only, also while training ran (tf-keras alone would have shown a
    # workertemp_1 directory here during the fit).
    assert rows[0]["seen"] == [["train"]] * 3, rows[0]["seen"]
    files = event_files(logs)
    assert len(files) == 1 and files[0].startswith("train" + os.sep), files
    # The other worker wrote to a temp directory that is gone; its callback looks as
    # the user made it.
    assert rows[1]["log_dir"] == logs and rows[0]["log_dir"] == logs
    assert rows[1]["temp_left"] == [] and rows[0]["temp_left"] == []


def test_tensorboard_flag_adds_a_callback_to_the_cells_fits(kernel, tmp_path):
    logs = str(tmp_path / "flagged")
    kernel.ok(f"%%tfdist --tensorboard {logs}\nmodel = build()\n"
              "model.fit(train, epochs=2, steps_per_epoch=3)", timeout=240)
    files = event_files(logs)
    assert len(files) == 1 and files[0].startswith("train" + os.sep), files


def test_tensorboard_magic_shows_the_logs_and_the_server_ends_with_the_cluster(kernel,
                                                                               tmp_path):
    out = kernel.ok("view = %tfdist tensorboard\n"
                    "print('VIEW', type(view).__name__, view.port, view.pid, view.logdir)",
                    timeout=120)
    name, port, pid, logdir = out.stdout.split("VIEW ", 1)[1].split()
    assert name == "TensorBoardView"
    # As a cell's result: TensorBoard's own notebook iframe, pointed at that port.
    shown = kernel.ok("view", timeout=60)
    html = "".join(r.get("text/html", "") for r in shown.results)
    assert "<iframe" in html and port in html, shown.results
    # Both earlier tests' directories are under the one shown.
    assert os.path.commonpath([logdir, str(tmp_path)]) == logdir
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=30) as page:
        assert page.status == 200
    again = kernel.ok("again = %tfdist tensorboard\nprint(again.pid)", timeout=60)
    assert again.stdout.strip() == pid                   # the same server, not a second one

    kernel.ok("%tfdist stop", timeout=60)
    deadline = time.monotonic() + 15
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not os.path.exists(f"/proc/{pid}")
    kernel.ok("%tfdist start -n 2", timeout=180)   # the fixture stops it at the end


def test_tensorboard_magic_bad_input_keeps_the_cluster(kernel, tmp_path):
    out = kernel.execute(f"%tfdist tensorboard {tmp_path / 'nowhere'}", timeout=60)
    # IPython shows a UsageError as one stderr line.
    assert out.status == "error" and out.stderr.strip().startswith("UsageError: no TensorBoard "
                                                                   "logs in"), out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    kernel.ok("%tfdist status", timeout=60)
