"""Worker-side reporting: the publisher's transport, and the Keras callback for real."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from tfmw_notebook.widgets.metrics import MetricsStore
from tfmw_notebook.worker.liveness.reporting import EventPublisher, events_key, new_events

pytestmark = pytest.mark.timeout(120)


class FakeClock:
    def __init__(self, now=1000.0):
        self.now = now

    def __call__(self):
        return self.now


def merged_like_ipyparallel(published):
    """The client keeps one dict per engine and dict.update()s each publish into it."""
    data = {}
    for message in published:
        data.update(message)
    return data


def test_each_flush_uses_a_fresh_key_so_merging_loses_nothing():
    published, clock = [], FakeClock()
    publisher = EventPublisher(published.append, rank=3, clock=clock)
    publisher.emit("train_begin", epochs=1, steps=2, mode="fit")
    publisher.emit("batch", epoch=0, step=0, logs={"loss": 1.0})
    clock.now += 1
    publisher.emit("batch", epoch=0, step=1, logs={"loss": 0.5})
    publisher.emit("epoch", epoch=0, logs={"loss": 0.5})

    keys = [key for message in published for key in message]
    assert keys == [events_key(seq) for seq in range(1, len(keys) + 1)]
    events, last_seq = new_events(merged_like_ipyparallel(published), 0)
    assert [e["kind"] for e in events] == ["train_begin", "batch", "batch", "epoch"]
    assert last_seq == len(keys)
    assert {e["rank"] for e in events} == {3}
    assert events[2]["time"] == clock.now


def test_batch_events_are_sent_together_at_most_every_min_interval():
    published, clock = [], FakeClock()
    publisher = EventPublisher(published.append, rank=0, min_interval=0.25, clock=clock)
    publisher.emit("batch", epoch=0, step=0, logs={})    # first batch goes out at once
    for step in range(1, 11):
        clock.now += 0.01
        publisher.emit("batch", epoch=0, step=step, logs={})
    assert len(published) == 1
    clock.now += 0.25
    publisher.emit("batch", epoch=0, step=11, logs={})
    assert len(published) == 2
    assert [e["step"] for e in published[1][events_key(2)]] == list(range(1, 12))


def test_epoch_train_end_and_report_flush_pending_batches_at_once():
    published, clock = [], FakeClock()
    publisher = EventPublisher(published.append, rank=0, clock=clock)
    publisher.emit("batch", epoch=0, step=0, logs={})
    publisher.emit("batch", epoch=0, step=1, logs={})
    assert len(published) == 1
    publisher.emit("epoch", epoch=0, logs={"loss": 1.0})
    assert [e["kind"] for e in published[-1][events_key(2)]] == ["batch", "epoch"]
    publisher.report({"loss": np.float32(0.25)}, step=7)
    (report,) = published[-1][events_key(3)]
    assert report["metrics"] == {"loss": 0.25} and type(report["metrics"]["loss"]) is float
    publisher.emit("train_end")
    assert published[-1][events_key(4)][0]["kind"] == "train_end"


def test_new_events_reads_only_unseen_keys_in_seq_order_and_ignores_other_keys():
    data = {events_key(10): [{"n": 10}], events_key(2): [{"n": 2}], events_key(9): [{"n": 9}],
            "user-key": [{"n": -1}], "tfmw-events-x": [{"n": -2}]}
    events, last = new_events(data, 0)
    assert [e["n"] for e in events] == [2, 9, 10] and last == 10
    events, last = new_events(data, 9)
    assert [e["n"] for e in events] == [10] and last == 10
    assert new_events(data, 10) == ([], 10)
    assert new_events(None, 4) == ([], 4)


def test_a_failing_publish_never_breaks_training():
    calls = []

    def broken_publish(message):
        calls.append(message)
        raise RuntimeError("no engine here")

    publisher = EventPublisher(broken_publish, rank=0)
    publisher.emit("train_begin", epochs=1, steps=1, mode="fit")
    publisher.emit("epoch", epoch=0, logs={"loss": 1.0})
    assert len(calls) == 2
    assert publisher.errors == 2 and publisher.dropped_events == 2
    assert isinstance(publisher.last_error, RuntimeError)


def test_lost_events_are_counted_on_the_next_publish_that_gets_through():
    published, failures = [], [RuntimeError("down"), RuntimeError("still down")]

    def flaky_publish(message):
        if failures:
            raise failures.pop(0)
        published.append(message)

    clock = FakeClock()
    publisher = EventPublisher(flaky_publish, rank=0, clock=clock)
    publisher.emit("train_begin", epochs=1, steps=2, mode="fit")      # lost
    clock.now += 1
    publisher.emit("batch", epoch=0, step=0, logs={"loss": 1.0})       # lost
    clock.now += 1
    publisher.emit("batch", epoch=0, step=1, logs={"loss": 0.5})
    publisher.emit("epoch", epoch=0, logs={"loss": 0.5})
    assert publisher.dropped_events == 2 and publisher.errors == 2

    sent, _ = new_events(merged_like_ipyparallel(published), 0)
    assert [e.get("dropped") for e in sent] == [2, None]              # told once, not again
    store = MetricsStore()
    store.feed(sent)
    assert store.lost_events == 2 and store.summary()["lost_events"] == 2


def test_a_lost_count_whose_own_publish_fails_is_told_with_the_next_one():
    published, calls = [], []

    def fails_twice(message):
        calls.append(message)
        if len(calls) <= 2:
            raise RuntimeError("down")
        published.append(message)

    publisher = EventPublisher(fails_twice, rank=0)
    publisher.emit("train_begin", epochs=1, steps=1, mode="fit")
    publisher.emit("epoch", epoch=0, logs={})                          # carries 1, lost too
    publisher.emit("train_end")
    assert calls[1][events_key(2)][-1]["dropped"] == 1
    assert published[0][events_key(3)][-1]["dropped"] == 2


def test_publisher_takes_whole_event_dicts_as_the_worker_context_sends_them():
    published = []
    publisher = EventPublisher(published.append, rank=1)
    publisher({"kind": "report", "rank": 1, "time": 5.0, "step": 2, "epoch": None,
               "metrics": {"loss": 0.5}})
    assert published == [{events_key(1): [{"kind": "report", "rank": 1, "time": 5.0, "step": 2,
                                           "epoch": None, "metrics": {"loss": 0.5}}]}]


def test_min_interval_must_not_be_negative():
    with pytest.raises(ValueError, match="min_interval"):
        EventPublisher(print, rank=0, min_interval=-1)


def test_importing_the_pure_modules_does_not_import_tensorflow():
    code = ("import sys, tfmw_notebook.protocol.events, tfmw_notebook.widgets.metrics,"
            " tfmw_notebook.worker.liveness.reporting, tfmw_notebook.widgets;"
            "print('tensorflow' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60, cwd=os.path.dirname(os.path.dirname(__file__)))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


# Runs in its own process so TF_USE_LEGACY_KERAS is set before TensorFlow loads,
# whatever other tests in this session imported.
KERAS_SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np
    import tensorflow as tf
    import tf_keras
    from tfmw_notebook.worker.fits import keras_reporting
    from tfmw_notebook.worker.fits.keras_callbacks import keras_callbacks
    from tfmw_notebook.worker.liveness.reporting import EventPublisher

    assert tf.keras.Model is tf_keras.Model, "tf.keras is not tf-keras"
    KerasReportingCallback = keras_callbacks().reporting   # the logic on tf-keras' Callback
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 8)).astype("float32")
    y = (x @ rng.normal(size=(8, 1)) + 0.1 * rng.normal(size=(256, 1))).astype("float32")
    x_val, y_val = x[:64] + 0.05, y[:64]

    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential([tf.keras.Input(shape=(8,)),
                                 tf.keras.layers.Dense(16, activation="relu"),
                                 tf.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse", metrics=["mae"])

    published = []
    # min_interval=0: every batch is sent, so the events can be checked one by one.
    callback = KerasReportingCallback(EventPublisher(published.append, rank=0, min_interval=0),
                                      samples_per_step=32)
    history = model.fit(x, y, batch_size=32, epochs=2, validation_data=(x_val, y_val),
                        verbose=0, callbacks=[callback])
    evaluated = model.evaluate(x_val, y_val, batch_size=32, verbose=0, callbacks=[callback],
                               return_dict=True)

    from tfmw_notebook.protocol.events import metric_value

    def error_of(make):
        try:
            make()
        except Exception as error:
            return f"{type(error).__name__}: {error}"

    # The default interval, on a clock that moves 0.1 s per batch: which batches had
    # their logs turned into numbers, and what Keras handed the callback.
    class BatchClock:
        now = 0.0
        def __call__(self):
            return self.now

    class Tick(tf.keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self._supports_tf_logs = True   # else Keras converts every batch's logs for it
        def on_train_batch_begin(self, batch, logs=None):
            clock.now += 0.1

    class Spy(type(callback)):
        def on_train_batch_end(self, batch, logs=None):
            logs_seen.append(type(logs["loss"]).__name__)
            super().on_train_batch_end(batch, logs)

    converted, logs_seen, throttled, clock = [], [], [], BatchClock()
    real_metric_values = keras_reporting.metric_values
    def counting_metric_values(logs):
        converted.append(sorted(logs or {}))
        return real_metric_values(logs)
    keras_reporting.metric_values = counting_metric_values
    model.fit(x, y, batch_size=8, epochs=3, verbose=0,
              callbacks=[Tick(), Spy(EventPublisher(throttled.append, rank=0, clock=clock))])
    keras_reporting.metric_values = real_metric_values

    publisher = EventPublisher(published.append, rank=0)
    json.dump({"published": published, "throttled": throttled, "converted": converted,
               "logs_seen": logs_seen, "history": history.history,
               "evaluated": {k: float(v) for k, v in evaluated.items()},
               "callback_class": type(callback).__qualname__,
               "class_by_name": (issubclass(type(callback), keras_reporting.KerasReportingCallback)
                                 and issubclass(type(callback), tf_keras.callbacks.Callback)),
               "positional_samples": error_of(
                   lambda: KerasReportingCallback(publisher, 32)),
               "zero_samples": error_of(lambda: KerasReportingCallback(publisher,
                                                                       samples_per_step=0)),
               "scalar_tensor": metric_value(tf.constant(0.5)),
               "nan_tensor": repr(metric_value(tf.constant(float("nan")))),
               "vector_tensor": metric_value(tf.ones(3))}, sys.stdout)
""")


@pytest.fixture(scope="module")
def keras_run():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="3",
               PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    result = subprocess.run([sys.executable, "-c", KERAS_SCRIPT], capture_output=True, text=True,
                            timeout=110, env=env, cwd=root)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


def test_keras_callback_is_a_named_class_with_keyword_arguments(keras_run):
    assert keras_run["callback_class"] == "KerasReportingCallback"
    assert keras_run["class_by_name"]
    assert keras_run["positional_samples"].startswith("TypeError")
    assert keras_run["zero_samples"] == (
        "ValueError: Invalid value for argument `samples_per_step`. Received: samples_per_step=0. "
        "Expected a positive integer or None.")


def test_tensors_are_coerced_like_numpy_scalars(keras_run):
    assert keras_run["scalar_tensor"] == 0.5
    assert keras_run["nan_tensor"] == "nan"
    assert keras_run["vector_tensor"] is None


def test_keras_callback_rebuilds_history_exactly(keras_run):
    published, history = keras_run["published"], keras_run["history"]
    assert set(history) == {"loss", "mae", "val_loss", "val_mae"}

    events, _ = new_events(merged_like_ipyparallel(published), 0)
    store = MetricsStore()
    store.feed(events)

    assert store.history(0) == history          # exact floats, per epoch
    assert len(history["loss"]) == 2
    assert store.metric_names() == {"loss": ["loss", "val_loss"], "mae": ["mae", "val_mae"]}


def test_keras_callback_events_follow_the_format(keras_run):
    events, _ = new_events(merged_like_ipyparallel(keras_run["published"]), 0)
    fit_events = events[:events.index(next(e for e in events if e["kind"] == "train_end")) + 1]

    begin = fit_events[0]
    assert begin["kind"] == "train_begin" and begin["mode"] == "fit"
    assert begin["epochs"] == 2 and begin["steps"] == 8          # 256 samples / batch 32
    batches = [e for e in fit_events if e["kind"] == "batch"]
    assert [(e["epoch"], e["step"]) for e in batches] == \
        [(ep, s) for ep in range(2) for s in range(8)]
    assert all(type(v) is float for e in batches for v in e["logs"].values())
    epochs = [e for e in fit_events if e["kind"] == "epoch"]
    assert [e["samples"] for e in epochs] == [256, 256]
    # The last batch's running mean is the epoch's training loss.
    assert batches[-1]["logs"]["loss"] == pytest.approx(epochs[-1]["logs"]["loss"])
    times = [e["time"] for e in events]
    assert times == sorted(times)


def test_keras_callback_reports_evaluate_but_not_fits_validation_pass(keras_run):
    events, _ = new_events(merged_like_ipyparallel(keras_run["published"]), 0)
    begins = [e for e in events if e["kind"] == "train_begin"]
    # fit ran validation twice through on_test_*; only the explicit evaluate counts.
    assert [b["mode"] for b in begins] == ["fit", "evaluate"]
    assert begins[1]["steps"] == 2                                # 64 samples / batch 32

    store = MetricsStore()
    store.feed(events)
    assert store.evaluation(0) == pytest.approx(keras_run["evaluated"])
    assert store.progress(0).mode == "evaluate" and store.progress(0).finished
    # Evaluate batches move the progress bar but do not join the training curves.
    assert len(store.batch_logs(0)) == 16


def test_batches_that_are_not_sent_are_never_converted(keras_run):
    """Keras hands the callback tensors (no sync of its own), and only the batches the
    publisher sends (at most every 0.25 s: here every third, the clock moving 0.1 s a
    batch, and each epoch's last) have their logs turned into numbers; every epoch is
    sent, exact."""
    events, _ = new_events(merged_like_ipyparallel(keras_run["throttled"]), 0)
    batches = [e for e in events if e["kind"] == "batch"]
    epochs = [e for e in events if e["kind"] == "epoch"]
    assert len(keras_run["logs_seen"]) == 3 * 32                   # 256 samples / batch 8
    assert set(keras_run["logs_seen"]) == {"EagerTensor"}, keras_run["logs_seen"]
    assert 3 * 32 // 4 <= len(batches) <= 3 * 32 // 3 + 3, len(batches)
    # One conversion per batch sent and one per epoch, none for the batches left out.
    assert len(keras_run["converted"]) == len(batches) + len(epochs)
    assert [e["epoch"] for e in epochs] == [0, 1, 2]
    assert [e["steps"] for e in epochs] == [32, 32, 32]
    assert [e["step"] for e in batches if e["step"] == 31] == [31, 31, 31]
    due = [e["step"] for e in batches if e["step"] != 31]
    assert all(later - earlier >= 2 for earlier, later in zip(due, due[1:]) if later > earlier)
    assert all(type(v) is float for e in batches + epochs for v in e["logs"].values())


def test_progress_counts_the_batches_an_epoch_event_covers():
    """The last batches of an epoch may not be sent: the epoch event's step count
    completes the progress and the global step used for steps/s."""
    store = MetricsStore()
    store.feed([{"kind": "train_begin", "rank": 0, "time": 0.0, "epochs": 2, "steps": None,
                 "mode": "fit"},
                {"kind": "batch", "rank": 0, "time": 1.0, "epoch": 0, "step": 3, "logs": {}},
                {"kind": "epoch", "rank": 0, "time": 2.0, "epoch": 0, "logs": {}, "steps": 10},
                {"kind": "batch", "rank": 0, "time": 3.0, "epoch": 1, "step": 4, "logs": {}}])
    progress = store.progress(0)
    assert progress.epoch == 1 and progress.step == 5
    assert progress.steps_per_second == pytest.approx((10 + 5 - 4) / 2.0)
