"""The dashboard on a real 2-worker cluster: a plain fit fills the metric store
with what Keras' History says, the cell shows the widget, then a PNG."""

import json

import pytest

pytestmark = pytest.mark.timeout(300)

SETUP = '''
import numpy as np
x = np.random.RandomState(0).uniform(0, 1, (512, 1)).astype("float32")
y = 2 * x
train = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).repeat()
val = tf.data.Dataset.from_tensor_slices((x[:64], y[:64])).batch(32)
model = tf.keras.Sequential([tf.keras.layers.Dense(10, input_shape=(1,)), tf.keras.layers.Dense(1)])
model.compile(optimizer=tf.keras.optimizers.SGD(0.05), loss="mse", metrics=["mae"])
'''


def test_plain_fit_fills_the_store_like_keras_history(tf_kernel):
    tf_kernel.ok("%%tfdist\n" + SETUP)
    out = tf_kernel.ok("%%tfdist\nhist = model.fit(train, epochs=4, steps_per_epoch=16, "
                       "validation_data=val)\nkeras_history = hist.history", timeout=200)
    # The live widget, then its replacement by a static image.
    assert any("application/vnd.jupyter.widget-view+json" in r for r in out.results)
    assert out.updates and "image/png" in out.updates[-1]
    # Keras' progress bar is replaced: the cell's text stays short.
    assert len(out.stdout.splitlines()) <= 3, out.stdout
    assert out.stdout.strip().splitlines()[-1].startswith("4 epochs · ")

    check = tf_kernel.ok(
        "import json\nfrom tfmw_notebook.magics.session import active_cluster\n"
        "store = %tfdist history\n"
        "print(json.dumps({'store': [store.history(r) for r in range(2)],"
        " 'last_batches': [[logs['loss'] for x, logs in store.batch_logs(r) if x % 1 == 0]"
        " for r in range(2)],"
        " 'keras': [active_cluster().pull(['keras_history'], rank=r)['keras_history']"
        " for r in range(2)]}))")
    seen = json.loads(check.stdout.strip().splitlines()[-1])
    for rank in range(2):
        assert set(seen["store"][rank]) == {"loss", "mae", "val_loss", "val_mae"}
        assert seen["store"][rank] == seen["keras"][rank]
        assert len(seen["store"][rank]["loss"]) == 4
        # The last batch's running loss is the epoch's loss: batch logs are not summed
        # over the workers (tf-keras' default would double them).
        assert seen["last_batches"][rank] == pytest.approx(seen["keras"][rank]["loss"], rel=1e-5)


def test_summary_counts_samples_from_the_datasets_batch(tf_kernel):
    tf_kernel.ok("%%tfdist\n" + SETUP)
    out = tf_kernel.ok("%%tfdist\nmodel.fit(train, epochs=2, steps_per_epoch=8)", timeout=200)
    assert "samples/s" in out.stdout.strip().splitlines()[-1], out.stdout
    check = tf_kernel.ok("store = %tfdist history\nprint(store.summary()['samples'])")
    # A global batch of 32 split over 2 workers, 16 steps in all, on each worker.
    assert check.stdout.strip() == str(2 * 8 * 32)


def test_custom_loop_reports_make_curves(tf_kernel):
    out = tf_kernel.ok("%%tfdist\nfor step in range(6):\n"
                       "    tfdist.report({'loss': 1.0 / (step + 1)}, step=step)\n", timeout=120)
    assert out.updates and "image/png" in out.updates[-1]
    check = tf_kernel.ok("store = %tfdist history\n"
                         "print([len(store.reports(r)) for r in range(2)])")
    assert check.stdout.strip() == "[6, 6]"


def test_evaluate_alone_ends_with_its_results_not_an_empty_figure(tf_kernel):
    out = tf_kernel.ok("%%tfdist\nmodel.evaluate(val)")
    assert out.stdout.strip().startswith("evaluate · ")
    assert "loss" in out.stdout
    assert not any("image/png" in update for update in out.updates)


def test_dashboard_off_for_a_cell_and_for_the_session(tf_kernel):
    out = tf_kernel.ok("%%tfdist --no-dashboard\nmodel.fit(train, epochs=1, steps_per_epoch=4)")
    assert not out.updates  # no dashboard...
    assert "[worker 0]" in out.stdout and "- loss:" in out.stdout  # ...Keras' own progress bar
    tf_kernel.ok("%tfdist dashboard off")
    out = tf_kernel.ok("%%tfdist\nmodel.fit(train, epochs=1, steps_per_epoch=4, verbose=0)")
    assert not out.updates and not out.results[:-1]
    tf_kernel.ok("%tfdist dashboard on")
