"""Keras-2 code on Keras 3 workers, and `%tfdist restart --keras 2|3`, on a real 2-worker
cluster started with `--keras 3`: the worker's error gets one line naming the switch; a
mistyped switch changes nothing; the switch keeps what the earlier cells defined (replayed
on the new workers) and says what it could not replay. The tests run in file order: the
last one switches the cluster to tf-keras."""

import re

import pytest

from kernel_session import kernel_with_cluster, per_worker

pytestmark = pytest.mark.timeout(900)

SWITCH_HINT = "`%tfdist restart --keras 2` gives them tf-keras"


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    with kernel_with_cluster(str(tmp_path_factory.mktemp("switch")), flags="--keras 3") as s:
        # Several TensorFlow clusters on 2 shared cores can keep a worker's heartbeat from
        # running for 6 s (the default); liveness is tested in test_liveness.py.
        s.ok("from tfmw_notebook import active_cluster\nactive_cluster().silence = 60.0")
        yield s


def test_keras_2_code_on_keras_3_workers_names_the_switch(kernel):
    # TensorFlow's custom-training tutorials reset their metrics this way (Keras 2).
    out = kernel.execute("%%tfdist\nloss_metric = tf.keras.metrics.Mean()\n"
                         "loss_metric.update_state(1.0)\nloss_metric.reset_states()",
                         timeout=180)
    assert out.status == "error"
    assert "has no attribute 'reset_states'" in out.error_text, out.error_text
    assert SWITCH_HINT in out.error_text, out.error_text


def test_an_error_keras_2_would_not_fix_gets_no_such_line(kernel):
    out = kernel.execute("%%tfdist\nloss_metric = tf.keras.metrics.Mean()\n"
                         "loss_metric.reset_state(1.0)", timeout=180)
    assert out.status == "error"
    assert "reset_state()" in out.error_text and SWITCH_HINT not in out.error_text, \
        out.error_text


def test_a_mistyped_keras_is_refused_in_one_line_and_loses_nothing(kernel):
    kernel.ok("%%tfdist\nkept = 7", timeout=180)
    before = kernel.ok("%tfdist status").stdout
    out = kernel.execute("%tfdist restart --keras 4")
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("UsageError: argument --keras: expected "
                                                   "3 or 2"), out.stderr
    assert "the workers were not touched" in lines[0]
    assert kernel.ok("%tfdist status").stdout == before   # the same processes
    assert per_worker(kernel, "kept") == [7, 7]


def test_switching_to_keras_2_replays_the_earlier_cells(kernel):
    kernel.ok("%%tfdist\nanswer = 42", timeout=180)
    kernel.ok("%%tfdist --no-dashboard --no-checkpoint\nimport numpy as np\n"
              "model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])\n"
              "model.compile(optimizer='sgd', loss='mse')\n"
              "history = model.fit(np.ones((64, 4), 'float32'), np.ones((64, 1), 'float32'), "
              "batch_size=16, epochs=1, verbose=0)\n"
              "fitted_by = type(model).__module__.split('.')[0]", timeout=300)
    # Keras 3 code: tf-keras has no `ops`, so replaying this cell fails.
    kernel.ok("%%tfdist\nthree = int(tf.keras.ops.add(1, 2))", timeout=180)
    kernel.ok("%%tfdist\nafter_it = 1", timeout=180)

    out = kernel.ok("%tfdist restart --keras 2", timeout=600)
    line = out.stdout.strip().splitlines()[-1]
    print(line)   # shown by pytest -rP: the line docs/keras.md quotes
    assert line.startswith("restarted: 2 fresh workers running tf-keras 2."), out.stdout
    assert "1 trained again: their kept state is of the other Keras" in line, line
    # Every cell logged before (an earlier test's too) was replayed, then the Keras 3 one
    # failed: the restore stopped there.
    restored = int(re.search(r"restored (\d+) cells", line).group(1))
    assert f"replaying cell {restored + 1} failed (" in line, line
    assert "has no attribute 'ops'" in line, line
    assert "so the cells after it were not replayed" in line, line

    assert per_worker(kernel, "answer") == [42, 42]
    assert per_worker(kernel, "fitted_by") == ["tf_keras", "tf_keras"]   # trained again
    kernel.ok("%%tfdist\ntf_keras_is = tf.keras.__name__.split('.')[0]", timeout=180)
    assert per_worker(kernel, "tf_keras_is") == ["tf_keras", "tf_keras"]
    missing = kernel.execute("%%tfdist\nafter_it", timeout=180)
    assert missing.status == "error" and "after_it" in missing.error_text
    # The Keras-2 code that failed before now runs.
    kernel.ok("%%tfdist\nloss_metric = tf.keras.metrics.Mean()\nloss_metric.reset_states()\n"
              "mse = tf.keras.losses.mean_squared_error([1.0], [0.0])", timeout=180)
    # And back: the start line's Keras.
    back = kernel.ok("%tfdist restart --keras 3", timeout=600)
    assert "running Keras 3." in back.stdout.strip().splitlines()[-1], back.stdout
    assert per_worker(kernel, "answer") == [42, 42]
