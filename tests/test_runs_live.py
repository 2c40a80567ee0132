"""Run records on a real 2-worker cluster in a real kernel: every fit of a %%tfdist cell
becomes a record on disk (completed, failed, interrupted, restored), `%tfdist runs` shows
and returns them, they outlive the kernel, and deleting one takes its checkpoints along."""

import json
import os
import threading
import time

import pytest

from kernel_session import KernelSession

pytestmark = pytest.mark.timeout(400)

SETUP = '''
import os, time
import numpy as np

x = np.random.RandomState(0).uniform(0, 1, (256, 4)).astype("float32")
y = x.sum(axis=1, keepdims=True)
train = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).repeat()
val = tf.data.Dataset.from_tensor_slices((x[:64], y[:64])).batch(32).repeat()

def build(lr):
    tf.keras.utils.set_random_seed(1)
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(8, activation="relu"),
                                 tf.keras.layers.Dense(1)])
    model.compile(optimizer=tf.keras.optimizers.Adam(lr), loss="mse")
    return model

class RaiseOnRank1(tf.keras.callbacks.Callback):
    """Rank 1's fit raises once it has trained (the chief's fit returns)."""
    def on_train_end(self, logs=None):
        if tfdist.rank == 1:
            raise RuntimeError("rank 1 refuses")

class KillRank1Once(tf.keras.callbacks.Callback):
    """Rank 1 dies as its second epoch begins, the first time only."""
    def on_epoch_begin(self, epoch, logs=None):
        if tfdist.rank == 1 and epoch == 1 and not os.path.exists(MARKER + ".killed"):
            open(MARKER + ".killed", "w").close()
            os.kill(os.getpid(), 9)

class SlowAfterFirstEpoch(tf.keras.callbacks.Callback):
    """From epoch 2 on, each epoch waits: the test interrupts meanwhile (MARKER says when)."""
    def on_epoch_begin(self, epoch, logs=None):
        if epoch >= 1:
            if tfdist.rank == 0:
                open(MARKER, "w").close()
            time.sleep(0.5)
'''


def records_in(kernel, root="tfdist_checkpoints"):
    out = kernel.ok("import json as _json, tfmw_notebook as _t\n"
                    f"print(_json.dumps(_t.list_runs({root!r}).records()))")
    return {r["name"]: r for r in json.loads(out.stdout.strip().splitlines()[-1])}


def interrupt_when(kernel, marker):
    def watch():
        deadline = time.monotonic() + 120
        while not os.path.exists(marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        kernel.interrupt()
    thread = threading.Thread(target=watch)
    thread.start()
    return thread


def test_every_fit_is_a_run_record_that_outlives_the_kernel(tf_kernel, tmp_path):
    kernel, cwd = tf_kernel, tf_kernel.cwd
    root = os.path.join(cwd, "tfdist_checkpoints")
    marker = str(tmp_path / "second-epoch")
    kernel.ok(f"%%tfdist\nMARKER = {marker!r}\n" + SETUP)
    before = set(records_in(kernel))

    # Two fits in one cell: two runs, each with its own checkpoints.
    kernel.ok("%%tfdist --name rec-done\nmodel = build(0.01)\n"
              "model.fit(train, epochs=2, steps_per_epoch=4, validation_data=val, "
              "validation_steps=2)\nmodel.fit(train, epochs=1, steps_per_epoch=4)")
    # Checkpointing off, no name: the next run-N, a directory with the record only.
    kernel.ok("%%tfdist --no-checkpoint\nmodel = build(0.1)\n"
              "model.fit(train, epochs=2, steps_per_epoch=4)")
    failed = kernel.execute("%%tfdist --name rec-failed\nmodel = build(0.01)\n"
                            "model.fit(train, epochs=1, steps_per_epoch=4, "
                            "callbacks=[RaiseOnRank1()])")
    assert failed.status == "error" and "rank 1 refuses" in failed.error["evalue"]
    watcher = interrupt_when(kernel, marker)
    interrupted = kernel.execute("%%tfdist --name rec-int --no-restore\nmodel = build(0.01)\n"
                                 "model.fit(train, epochs=50, steps_per_epoch=4, "
                                 "callbacks=[SlowAfterFirstEpoch()])", timeout=200)
    watcher.join(timeout=30)
    assert interrupted.status == "error" and "interrupted" in interrupted.error["evalue"]
    stopped = records_in(kernel)["rec-int"]
    assert stopped["outcome"] == "interrupted" and stopped["epochs"][:1] == [0], stopped
    assert "interrupted" in stopped["error"]
    kernel.ok(f"%%tfdist\nMARKER = {marker!r}\n" + SETUP)   # the workers are fresh
    kernel.ok("%%tfdist --resume-from tfdist_checkpoints/rec-int\nmodel = build(0.01)\n"
              "model.fit(train, epochs=3, steps_per_epoch=4)")
    restarted = kernel.ok("%%tfdist --name rec-restarted --max-restarts 1 --no-checkpoint\n"
                          "model = build(0.01)\nmodel.fit(train, epochs=3, steps_per_epoch=4, "
                          "callbacks=[KillRank1Once()])", timeout=200)
    assert "restart 1 of 1" in restarted.stderr

    check_names_are_checked(kernel, root)
    check_the_browser_and_what_the_notebook_keeps(kernel)
    runs = records_in(kernel)
    new = {name: runs[name] for name in set(runs) - before}
    auto = [name for name in new if name.startswith("run-")]
    assert sorted(new) == sorted(["rec-done", "rec-done.2", "rec-failed", "rec-int",
                                  "rec-restarted"] + auto)
    assert len(auto) == 1
    check_completed(new["rec-done"], new["rec-done.2"], root)
    check_without_checkpoints(new[auto[0]], root)
    check_failed_interrupted_restored(new["rec-failed"], new["rec-int"], new["rec-restarted"])
    check_survives_a_new_kernel(cwd, runs)
    check_deletion(kernel, root, runs)


def check_names_are_checked(kernel, root):
    everything = sorted(os.listdir(root))
    assert "run name 'rec-done' is already used" in usage_error(
        kernel, "%%tfdist --name rec-done\nmodel.fit(train, epochs=1, steps_per_epoch=2)")
    assert "is not usable" in usage_error(
        kernel, "%%tfdist --name ../up\nmodel.fit(train, epochs=1, steps_per_epoch=2)")
    assert "nothing was run" in usage_error(
        kernel, "%%tfdist --name x --checkpoint-dir y\nmodel.fit(train, epochs=1)")
    assert sorted(os.listdir(root)) == everything


def check_the_browser_and_what_the_notebook_keeps(kernel):
    out = kernel.ok("%tfdist runs")
    static, browser = out.results
    assert "application/vnd.jupyter.widget-view+json" in browser         # live: the browser
    table = static["text/html"]              # what a saved notebook shows without the kernel
    assert 'class="tfmw-runs-static"' in table and 'class="tfmw-runs-table"' in table
    for name in ("rec-done", "rec-done.2", "rec-failed", "rec-int"):
        assert f">{name}<" in table
    assert 'src="data:image/png;base64,iVBORw0KGgo' in table              # and the figure
    assert static["image/png"].startswith("iVBORw0KGgo")
    code = kernel.ok("runs = %tfdist runs\nrecords = runs.records()\n"
                     "print(sorted({r['outcome'] for r in records}), len(records) == len(runs),"
                     " type(runs.to_dataframe()).__name__)")
    assert code.results == [] and code.stdout.split("] ")[1].strip() == "True DataFrame"
    assert "'completed'" in code.stdout and "'failed'" in code.stdout


def check_completed(done, second, root):
    assert done["outcome"] == second["outcome"] == "completed"
    assert done["epochs"] == [0, 1] and second["epochs"] == [0]
    assert set(done["history"]) == {"loss", "val_loss"} and len(done["history"]["loss"]) == 2
    params = done["hyperparameters"]
    assert params["epochs"] == 2 and params["steps_per_epoch"] == 4 and params["validation"]
    assert params["batch_size"] == 32 and params["optimizer"] == "Adam"
    assert params["learning_rate"] == pytest.approx(0.01)
    assert params["optimizer_config"]["learning_rate"] == pytest.approx(0.01)
    assert params["loss"] == "mse" and params["parameters"] == 4 * 8 + 8 + 8 + 1
    assert done["sweep"] == {} and "model.fit(train, epochs=2" in done["source"]
    assert done["wall_time"] > 0 and done["samples_per_second"] > 0
    assert done["cluster"]["workers"] == 2 and done["cluster"]["keras"].startswith("tf-keras")
    assert done["cluster"]["devices"] == "CPU" and len(done["cluster"]["hosts"]) == 1
    assert done["checkpoint_dir"] == os.path.join(root, "rec-done")
    assert second["checkpoint_dir"] == os.path.join(root, "rec-done.2")
    assert sorted(n for n in os.listdir(second["checkpoint_dir"]) if n.startswith("ckpt-")) == [
        "ckpt-000001"]
    assert "ckpt-000002" in os.listdir(done["checkpoint_dir"])


def check_without_checkpoints(auto, root):
    assert auto["outcome"] == "completed" and auto["checkpoint_dir"] is None
    assert auto["hyperparameters"]["learning_rate"] == pytest.approx(0.1)
    assert os.listdir(os.path.join(root, auto["name"])) == ["run.json"]


def check_failed_interrupted_restored(failed, resumed, restarted):
    assert failed["outcome"] == "failed" and "rank 1 refuses" in failed["error"]
    # rec-int was interrupted in its second epoch, then resumed from its checkpoint of
    # epoch 1 to epoch 3: the record goes on, marked restored.
    assert resumed["outcome"] == "restored", resumed
    assert resumed["epochs"] == [0, 1, 2] and len(resumed["history"]["loss"]) == 3
    # rec-restarted lost rank 1 in its second epoch; --max-restarts brought the workers
    # back and the fit resumed from its backup: every epoch is in the record.
    assert restarted["outcome"] == "restored", restarted
    assert restarted["epochs"] == [0, 1, 2] and len(restarted["history"]["loss"]) == 3


def check_survives_a_new_kernel(cwd, runs):
    fresh = KernelSession(cwd=cwd)
    try:
        assert records_in(fresh) == runs
    finally:
        fresh.shutdown()


def check_deletion(kernel, root, runs):
    everything = sorted(os.listdir(root))
    out = kernel.ok("%tfdist runs --delete rec-done.2")
    assert "deleted run rec-done.2" in out.stdout
    assert sorted(os.listdir(root)) == [n for n in everything if n != "rec-done.2"]
    assert set(records_in(kernel)) == set(runs) - {"rec-done.2"}
    assert usage_error(kernel, "%tfdist runs --delete rec-done.2").startswith(
        "UsageError: no run named 'rec-done.2' under ")


def usage_error(kernel, code):
    out = kernel.execute(code)
    lines = [line for line in out.stderr.splitlines() if line.startswith("UsageError: ")]
    assert out.status == "error" and len(lines) == 1, out.stderr
    return lines[0]
