"""A mistake costs nothing: workers keep their state after an error every worker
finished, and get it back (without training again) when they must be restarted.

Real 2-worker cluster, real kernel. Each case trains first, takes a digest of the
model and optimizer on every worker, makes the fault, then checks the next cell.
"""

import json
import os
import threading
import time

import pytest

from kernel_session import kernel_with_cluster
from test_faults import wait_until_gone, worker_processes

pytestmark = pytest.mark.timeout(420)

SETUP = '''
import numpy as np

rng = np.random.RandomState(0)
x = rng.uniform(0, 1, (512, 28, 28)).astype("float32")
y = rng.randint(0, 10, 512).astype("int64")
train = tf.data.Dataset.from_tensor_slices((x, y)).batch(64).repeat()

def build(optimizer="adam"):
    tf.keras.utils.set_random_seed(1)
    model = tf.keras.Sequential([
        tf.keras.layers.InputLayer(input_shape=(28, 28)),
        tf.keras.layers.Reshape(target_shape=(28, 28, 1)),
        tf.keras.layers.Conv2D(8, 3, activation="relu"),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(10)])
    model.compile(optimizer=optimizer,
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model

class CountEpochs(tf.keras.callbacks.Callback):
    """Appends a line per epoch begun on this worker: a replayed fit must add none."""
    def on_epoch_begin(self, epoch, logs=None):
        with open(f"{EPOCH_LOG}.{tfdist.rank}", "a") as log:
            log.write(f"{epoch}\\n")

def digest(model):
    import hashlib
    h = hashlib.sha256()
    for value in model.get_weights() + [v.numpy() for v in model.optimizer.variables]:
        h.update(value.tobytes())
    return h.hexdigest()
'''

# Two fits: one saved by the automatic checkpoints, one with them off (a snapshot).
TRAIN = '''
model = build()
history = model.fit(train, epochs=3, steps_per_epoch=4, callbacks=[CountEpochs()])
'''
TRAIN_UNSAVED = '''
other = build("sgd")
other_history = other.fit(train, epochs=2, steps_per_epoch=3, callbacks=[CountEpochs()])
'''
# Every worker takes part: one that does not leaves the others waiting here.
ALL_REDUCE = "strategy.reduce('SUM', strategy.run(lambda: tf.constant(1.0)), axis=None)"
STATE = ("(digest(model), digest(other), int(model.optimizer.iterations.numpy()), "
         "history.history['loss'], other_history.history['loss'])")


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    with kernel_with_cluster(str(tmp_path_factory.mktemp("state-kernel"))) as session:
        session.ok("import statistics\nlearning_rate = 0.1")  # for the NameError hints
        yield session


@pytest.fixture
def trained(kernel, tmp_path):
    """Fresh workers with two trained models; returns the state on every worker."""
    kernel.ok("%tfdist restart", timeout=120)
    log = str(tmp_path / "epochs")
    kernel.ok(f"%%tfdist\nEPOCH_LOG = {log!r}\n" + SETUP)
    kernel.ok("%%tfdist\n" + TRAIN, timeout=180)
    kernel.ok("%%tfdist --no-checkpoint\n" + TRAIN_UNSAVED, timeout=180)
    state = state_on_every_worker(kernel)
    assert state[0] == state[1]
    return {"state": state[0], "epochs": epochs_begun(log), "log": log}


def state_on_every_worker(kernel):
    """Each worker's own digests, step count and History, as it prints them."""
    out = kernel.ok("%%tfdist --all-output\nimport json\nprint('STATE', json.dumps([" + STATE +
                    "]))", timeout=60)
    rows = [json.loads(line.split("STATE ", 1)[1]) for line in out.stdout.splitlines()
            if "STATE " in line]
    assert len(rows) == 2, f"stdout: {out.stdout!r}\nstderr: {out.stderr!r}"
    return rows


def epochs_begun(log):
    return [open(f"{log}.{rank}").read().split() for rank in range(2)]


def assert_state_kept(kernel, trained):
    state = state_on_every_worker(kernel)
    assert state == [trained["state"]] * 2
    # Nothing trained again: no epoch was begun on any worker since.
    assert epochs_begun(trained["log"]) == trained["epochs"]


# -- errors every worker finished: the workers are kept --------------------------------

def assert_kept(out, pids_before, kernel):
    assert out.status == "error"
    assert out.error["ename"] == "WorkerFailed"
    assert "workers were kept" in out.error["evalue"], out.error["evalue"]
    assert "restarting" not in out.stderr
    pids_after, _ = worker_processes(kernel)
    assert pids_after == pids_before


def test_name_error_on_every_worker_keeps_workers_and_state(kernel, trained):
    pids, _ = worker_processes(kernel)
    out = kernel.execute("%%tfdist\nprint(nothing_has_this_name)")
    assert_kept(out, pids, kernel)
    assert "NameError" in out.error["evalue"]
    assert "defined in this notebook" not in out.error_text  # the notebook lacks it too
    assert_state_kept(kernel, trained)


def test_shape_error_at_model_build_keeps_workers_and_state(kernel, trained):
    pids, _ = worker_processes(kernel)
    # Dense creates (and broadcasts) its variables before Reshape finds 64 != 7*7*2.
    out = kernel.execute("%%tfdist\nbroken = tf.keras.Sequential([\n"
                         "    tf.keras.layers.InputLayer(input_shape=(28, 28)),\n"
                         "    tf.keras.layers.Flatten(), tf.keras.layers.Dense(64),\n"
                         "    tf.keras.layers.Reshape((7, 7, 2))])")
    assert_kept(out, pids, kernel)
    assert "ValueError" in out.error["evalue"]
    assert_state_kept(kernel, trained)
    # The collectives still work: training goes on where it was.
    kernel.ok("%%tfdist\nmodel.fit(train, epochs=4, initial_epoch=3, steps_per_epoch=4, "
              "verbose=0)\nassert int(model.optimizer.iterations.numpy()) == 16", timeout=120)


CUSTOM_LOOP = '''
loop_model = build()
loop_optimizer = tf.keras.optimizers.SGD(0.05)
loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(
    from_logits=True, reduction=tf.keras.losses.Reduction.NONE)
iterator = iter(strategy.experimental_distribute_dataset(train))

@tf.function
def train_step(inputs, fail):
    def step_fn(batch):
        features, labels = batch
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(loss_fn(labels, loop_model(features)),
                                              global_batch_size=64)
        # The middle of the step: after the forward pass, before the all-reduce.
        tf.debugging.Assert(tf.logical_not(fail), ["injected failure in the step"])
        grads = tape.gradient(loss, loop_model.trainable_variables)
        loop_optimizer.apply_gradients(zip(grads, loop_model.trainable_variables))
        return loss
    return strategy.reduce("SUM", strategy.run(step_fn, args=(inputs,)), axis=None)

for _ in range(3):
    train_step(next(iterator), tf.constant(False))

def weights_digest(model):
    import hashlib
    return hashlib.sha256(b"".join(w.tobytes() for w in model.get_weights())).hexdigest()

loop_digest = weights_digest(loop_model)
'''


def test_error_in_the_middle_of_a_custom_loop_step_keeps_workers(kernel, trained):
    kernel.ok("%%tfdist\n" + CUSTOM_LOOP, timeout=120)
    pids, _ = worker_processes(kernel)
    out = kernel.execute("%%tfdist\nfor _ in range(2):\n"
                         "    train_step(next(iterator), tf.constant(True))")
    assert_kept(out, pids, kernel)
    assert "injected failure in the step" in out.stderr   # the worker's traceback, shown once
    # The failing step changed no weight on any worker.
    digests = kernel.ok("%%tfdist --all-output\nprint('LOOP', weights_digest(loop_model), "
                        "loop_digest)")
    rows = [line.split("LOOP ", 1)[1].split() for line in digests.stdout.splitlines()
            if "LOOP " in line]
    assert len(rows) == 2 and all(now == before for now, before in rows)
    # ...and the loop goes on: one more step on both workers, same loss.
    out = kernel.ok("%%tfdist --all-output\n"
                    "print('STEP', float(train_step(next(iterator), tf.constant(False))), "
                    "weights_digest(loop_model) != loop_digest)")
    steps = [line.split("STEP ", 1)[1] for line in out.stdout.splitlines() if "STEP " in line]
    assert len(steps) == 2 and steps[0] == steps[1] and steps[0].endswith(" True")
    assert_state_kept(kernel, trained)


def test_name_error_hint_for_a_notebook_variable_and_module(kernel):
    out = kernel.execute("%%tfdist\nrate = learning_rate * 2")
    assert out.status == "error"
    assert ("`learning_rate` is defined in this notebook but not on the workers: `import` it "
            "in a %%tfdist cell, or pass `--push learning_rate`") in out.error_text
    out = kernel.execute("%%tfdist\nstatistics.mean([1, 2])")
    assert "add `import statistics` to a %%tfdist cell" in out.error_text


UNEVEN_COLLECTIVES = '''
@tf.function
def guarded_sum(fail):
    check = tf.debugging.Assert(tf.logical_not(fail), ["refused before the all-reduce"])
    with tf.control_dependencies([check]):
        one = tf.identity(tf.constant(1.0))
    return strategy.reduce("SUM", strategy.run(lambda: one), axis=None)

if tfdist.rank == 0:
    raise ValueError("worker 0 stops before any collective")
# Worker 1 fails a second later (well inside the error grace), so worker 0's error is
# the first the notebook hears of: the one the cell names. Worker 1 takes the
# all-reduce's instance key when the call starts; the assert then fails before the
# all-reduce runs. Both finish, but worker 1 is one collective ahead.
import time
time.sleep(1)
guarded_sum(tf.constant(True))
'''


def test_workers_that_disagree_on_collectives_are_restarted_and_restored(kernel, trained):
    pids, _ = worker_processes(kernel)
    out = kernel.execute("%%tfdist\n" + UNEVEN_COLLECTIVES, timeout=180)
    assert out.status == "error"
    assert "worker 0 failed: ValueError: worker 0 stops before any collective" in (
        out.error["evalue"])
    assert "restarting the workers (the workers ran different numbers of collectives)" in (
        out.stderr)
    assert_restored(out, pids, kernel, trained)


# -- restarts the workers need: the state comes back without training -----------------

def assert_restored(out, pids_before, kernel, trained):
    assert out.status == "error"
    assert out.error["ename"] == "WorkerFailed"
    assert "restored" in out.error["evalue"], out.error["evalue"]
    # One line says what came back, with the saved fits counted (stdout: all is well).
    lines = [line for line in out.stdout.splitlines() if "tfdist: restored" in line]
    assert len(lines) == 1 and "(2 fits restored from checkpoints)" in lines[0], out.stdout
    assert wait_until_gone(pids_before, 5) == []
    pids_after, _ = worker_processes(kernel)
    assert not set(pids_after) & set(pids_before)
    assert_state_kept(kernel, trained)


def test_killed_worker_restores_state_without_training(kernel, trained):
    pids, _ = worker_processes(kernel)
    out = kernel.execute("%%tfdist\nimport os, signal\n"
                         "if tfdist.rank == 1:\n    os.kill(os.getpid(), signal.SIGKILL)\n"
                         + ALL_REDUCE, timeout=180)
    assert "died" in out.error["evalue"]
    assert_restored(out, pids, kernel, trained)


def test_one_rank_error_while_the_other_waits_restores_state(kernel, trained):
    pids, _ = worker_processes(kernel)
    out = kernel.execute("%%tfdist\nif tfdist.rank == 1:\n    raise ValueError('only here')\n"
                         + ALL_REDUCE, timeout=180)
    assert "worker 1 failed: ValueError: only here" in out.error["evalue"]
    assert_restored(out, pids, kernel, trained)


def test_interrupt_during_fit_restores_state(kernel, trained, tmp_path):
    pids, _ = worker_processes(kernel)
    marker = str(tmp_path / "fitting")
    code = ("class Mark(tf.keras.callbacks.Callback):\n"
            "    def on_train_batch_end(self, batch, logs=None):\n"
            f"        if batch == 2: open({marker!r}, 'w').close()\n"
            "scratch = build()\n"
            "scratch.fit(train, epochs=100, steps_per_epoch=50, verbose=0, callbacks=[Mark()])")

    def interrupt_when_fitting():
        deadline = time.monotonic() + 120
        while not os.path.exists(marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        kernel.interrupt()

    watcher = threading.Thread(target=interrupt_when_fitting)
    watcher.start()
    out = kernel.execute("%%tfdist --no-checkpoint\n" + code, timeout=240)
    watcher.join(timeout=30)
    assert "interrupted" in out.error["evalue"]
    assert_restored(out, pids, kernel, trained)


def test_no_restore_leaves_fresh_workers(kernel, trained):
    out = kernel.execute("%%tfdist --no-restore\nif tfdist.rank == 1:\n    raise ValueError('x')\n"
                         + ALL_REDUCE, timeout=180)
    assert "variables were reset" in out.error["evalue"]
    out = kernel.execute("%%tfdist\nmodel")
    assert "NameError" in out.error["evalue"]


def test_max_restarts_replays_earlier_fits_without_training(kernel, trained, tmp_path):
    marker = str(tmp_path / "killed-once")
    out = kernel.execute(
        "%%tfdist --max-restarts 1 --no-checkpoint\nimport os, signal\n"
        f"if tfdist.rank == 1 and not os.path.exists({marker!r}):\n"
        f"    open({marker!r}, 'w').close()\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "total = " + ALL_REDUCE + "\n"
        "float(total)", timeout=240)
    assert out.status == "ok", out.error_text + out.stderr
    assert "restart 1 of 1" in out.stderr and "(2 fits restored from checkpoints)" in out.stdout
    assert out.results[-1]["text/plain"] == "2.0"
    assert_state_kept(kernel, trained)
