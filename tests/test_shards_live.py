"""`%%tfdist --shard`: notebook data split by rows over real workers, as a user runs it.

One kernel, 3 workers on this host (rows from the shared file): every worker holds its
rows of arrays, DataFrames and Series, in rank order and aligned; fit() on them takes
ceil(rows / batch) steps an epoch and sees every row once (tf.keras and Keras 3), while
data every worker holds whole still gets Keras' own split; bad input is refused in one
line with the cluster and the notebook's variables intact; a resize splits the rows
over the new workers. Workers on other hosts: tests/test_multihost.py.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from kernel_session import kernel_with_cluster, per_worker

pytestmark = pytest.mark.timeout(300)

DATA = '''
import numpy as np, pandas as pd
x = np.arange(22, dtype=np.float32).reshape(11, 2)
frame = pd.DataFrame({"n": np.arange(11) * 10, "name": [f"r{i}" for i in range(11)],
                      "when": pd.date_range("2026-01-01", periods=11, freq="D")},
                     index=pd.RangeIndex(100, 111, name="id"))
labels = pd.Series(np.arange(11, dtype=np.float32), name="label")
'''
LOOK = '''
got = {"x": x.tolist(), "n": frame["n"].tolist(), "name": frame["name"].tolist(),
       "when": [str(d.date()) for d in frame["when"]], "index": frame.index.tolist(),
       "index_name": frame.index.name, "dtypes": [str(t) for t in frame.dtypes][:1],
       "labels": labels.tolist(), "label_index": labels.index.tolist()}
'''
RECORDER = '''
import numpy as np
K = {keras}
seen = []
@tf.py_function(Tout=tf.float32)
def note(rows):
    seen[-1].extend(rows.numpy()[:, 0].tolist())
    return 0.0
class Note(K.layers.Layer):
    def call(self, v):
        note(v)
        return v
class PerEpoch(K.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        seen.append([])
inputs = K.Input((2,))
model = K.Model(inputs, K.layers.Dense(1)(Note()(inputs)))
model.compile(K.optimizers.Adam(0.01), "mse")
'''
DIGEST = '''
import hashlib
digest = hashlib.sha256(b"".join(w.tobytes() for w in model.get_weights())).hexdigest()
'''


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    with kernel_with_cluster(str(tmp_path_factory.mktemp("shards-kernel")), workers=3) \
            as session:
        session.ok(DATA)
        yield session


def _bounds(rows: int, workers: int) -> list[tuple[int, int]]:
    sizes = [len(part) for part in np.array_split(np.arange(rows), workers)]
    starts = np.cumsum([0, *sizes])
    return [(int(starts[i]), int(starts[i + 1])) for i in range(workers)]


def test_each_worker_holds_its_rows_of_every_value(kernel):
    kernel.ok("%%tfdist --shard x frame labels --no-checkpoint\n" + LOOK)
    got = per_worker(kernel, "got")
    for rank, (start, stop) in enumerate(_bounds(11, 3)):
        rows = list(range(start, stop))
        assert got[rank]["x"] == [[2.0 * i, 2.0 * i + 1] for i in rows]
        assert got[rank]["n"] == [10 * i for i in rows]
        assert got[rank]["name"] == [f"r{i}" for i in rows]
        assert got[rank]["when"] == [f"2026-01-{1 + i:02d}" for i in rows]
        assert got[rank]["index"] == [100 + i for i in rows]
        assert got[rank]["index_name"] == "id" and got[rank]["dtypes"] == ["int64"]
        assert got[rank]["labels"] == [float(i) for i in rows]
        assert got[rank]["label_index"] == rows
    # The notebook's own values are untouched (the workers' rows are copies on write).
    out = kernel.ok("print(float(x.sum()), len(frame), list(frame.index)[:2])")
    assert out.stdout.split() == ["231.0", "11", "[100,", "101]"]


@pytest.mark.parametrize("keras", ["tf.keras", "keras"])
def test_fit_on_own_rows_takes_every_row_once_an_epoch(kernel, keras):
    """11 rows over 3 workers (4, 4, 3), global batch 6 (2 a worker): ceil(11 / 6) = 2
    steps an epoch, the last worker's second batch holding 1 row."""
    prefix = "import keras\n" if keras == "keras" else ""
    kernel.ok("%%tfdist --shard x labels --no-checkpoint\n" + prefix
              + RECORDER.format(keras=keras)
              + "model.fit(x, labels, batch_size=6, epochs=3, verbose=0, "
                "callbacks=[PerEpoch()])\n"
                "steps = int(model.optimizer.iterations.numpy())\n" + DIGEST, timeout=180)
    assert per_worker(kernel, "steps") == [2 * 3] * 3
    seen = per_worker(kernel, "seen")
    for rank, (start, stop) in enumerate(_bounds(11, 3)):
        assert len(seen[rank]) == 3
        for epoch in seen[rank]:     # shuffled each epoch: every row once
            assert sorted(epoch) == [2.0 * i for i in range(start, stop)]
    assert seen[0][0] != seen[0][1] or seen[0][1] != seen[0][2]
    assert len(set(per_worker(kernel, "digest"))) == 1
    # predict on own rows runs on each worker alone (Keras' would wait forever for the
    # worker with one row more), its rows' predictions in order.
    kernel.ok("%%tfdist --no-checkpoint\nseen.append([])\n"
              "predicted = model.predict(x, batch_size=3, verbose=0)\n"
              "kernel, bias = model.get_weights()\n"
              "predicted = [len(predicted), bool(np.allclose(predicted, x @ kernel + bias, "
              "atol=1e-4))]", timeout=120)
    assert per_worker(kernel, "predicted") == [[4, True], [4, True], [3, True]]

    # Data every worker holds whole (24 rows, not a shard's count): Keras' own split.
    kernel.ok("%%tfdist --no-checkpoint\n" + prefix + RECORDER.format(keras=keras)
              + "whole = np.arange(48, dtype=np.float32).reshape(24, 2)\n"
                "model.fit(whole, whole[:, :1], batch_size=6, epochs=1, verbose=0, "
                "shuffle=False, callbacks=[PerEpoch()])\n"
                "steps = int(model.optimizer.iterations.numpy())", timeout=180)
    assert per_worker(kernel, "steps") == [4] * 3
    assert sum(len(worker[0]) for worker in per_worker(kernel, "seen")) == 24


def test_a_pipeline_sliced_from_shards_takes_every_row_once_an_epoch(kernel):
    """`tf.data.Dataset.from_tensor_slices(shards).shuffle().batch(6)`: the same steps and
    rows as the arrays themselves (Keras' own split would keep 1/3 of each worker's)."""
    kernel.ok("%%tfdist --shard x labels --no-checkpoint\n" + RECORDER.format(keras="tf.keras")
              + "pipeline = (tf.data.Dataset.from_tensor_slices((x, labels)).shuffle(11)"
                ".map(lambda a, b: (a, b * 2)).batch(6))\n"
                "model.fit(pipeline, epochs=2, verbose=0, callbacks=[PerEpoch()])\n"
                "steps = int(model.optimizer.iterations.numpy())", timeout=180)
    assert per_worker(kernel, "steps") == [2 * 2] * 3
    for rank, (start, stop) in enumerate(_bounds(11, 3)):
        for epoch in per_worker(kernel, "seen")[rank]:
            assert sorted(epoch) == [2.0 * i for i in range(start, stop)]


def _kernel_files(kernel) -> dict[str, int]:
    """This kernel's shared files and their sizes."""
    prefix = f"tfmw-shard-{kernel.kernel_pid()}-"
    return {name: os.path.getsize(os.path.join("/dev/shm", name))
            for name in os.listdir("/dev/shm") if name.startswith(prefix)}


def test_a_large_push_reaches_every_worker_whole_through_shared_memory(kernel):
    before = _kernel_files(kernel)
    kernel.ok("big = np.arange(17 << 20, dtype=np.float32)   # 68 MiB")
    kernel.ok("%%tfdist --push big --no-checkpoint\nsize, last = len(big), float(big[-1])")
    assert per_worker(kernel, "size") == [17 << 20] * 3
    assert per_worker(kernel, "last") == [float(np.float32((17 << 20) - 1))] * 3
    added = {name: size for name, size in _kernel_files(kernel).items() if name not in before}
    assert list(added.values()) == [68 << 20]   # one copy for the three workers
    # Pushed whole, it is no shard: a fit on it is split by Keras as before.
    kernel.ok("%%tfdist --push big --no-checkpoint\n"
              "from tfmw_notebook.worker.data import shards\nheld = 'big' in shards.live_rows()")
    assert per_worker(kernel, "held") == [False] * 3
    kernel.ok("big = np.zeros(3)")
    kernel.ok("%%tfdist --push big --no-checkpoint\nsize = len(big)")
    assert per_worker(kernel, "size") == [3] * 3
    assert not set(_kernel_files(kernel)) - set(before)   # replaced: its file freed


def _usage_error(kernel, code: str) -> str:
    out = kernel.execute(code)
    lines = [line for line in out.stderr.splitlines() if line.startswith("UsageError: ")]
    assert out.status == "error" and len(lines) == 1 and out.error is None, out.stderr
    return lines[0]


def test_bad_input_is_refused_in_one_line_and_loses_nothing(kernel, small_shared_memory):
    kernel.ok("%%tfdist\nkept_on_workers = tfdist.rank")
    kernel.ok("rows = (i for i in range(3))\nshort = np.zeros(5)\nlock = __import__("
              "'threading').Lock()\nbig = np.zeros((8, 1 << 16), np.float32)\nprecious = 42")
    cases = {
        "%%tfdist --shard rows\n1": "--shard rows: a generator cannot be split by rows",
        "%%tfdist --shard lock\n1": "--shard lock: a _thread.lock cannot be split by rows",
        "%%tfdist --shard x short\n1": "(x has 11, short has 5); shard them in separate cells",
        "%%tfdist --shard nowhere\n1": "--shard nowhere: the notebook has no variable named",
        "%%tfdist --shard x --push x\n1": "--shard x and --push x: a variable is either split",
    }
    for code, message in cases.items():
        assert message in _usage_error(kernel, code), code
    kernel.ok("from tfmw_notebook.protocol import shard_layout\n"
              f"shard_layout.SHARED_DIRECTORY = {small_shared_memory!r}")
    try:
        line = _usage_error(kernel, "%%tfdist --shard big\n1")
        assert "--shard big: 2.0 MiB of arrays do not fit in the shared memory left" in line
        assert os.listdir(small_shared_memory) == []
    finally:
        kernel.ok("shard_layout.SHARED_DIRECTORY = '/dev/shm'")
    assert per_worker(kernel, "kept_on_workers") == [0, 1, 2]
    assert kernel.ok("%%tfdist\ntfdist.rank + 1").results[-1]["text/plain"] == "1"
    assert kernel.ok("print(precious)").stdout.strip() == "42"


def test_a_resize_splits_the_rows_over_the_new_workers(kernel):
    kernel.ok("%%tfdist --shard x labels --no-checkpoint\nn_rows = len(x)")
    kernel.ok("%tfdist resize -n 2", timeout=240)
    kernel.ok("%%tfdist --no-checkpoint\nfirst = float(x[0, 0]); n_rows = len(x)")
    assert per_worker(kernel, "n_rows") == [6, 5]
    assert per_worker(kernel, "first") == [0.0, 12.0]
    files = _kernel_files(kernel)
    assert files, "the set stays while the workers hold it"
    kernel.ok("%tfdist stop")
    assert not _kernel_files(kernel)
