"""Checkpoints and fault tolerance on real 2-worker clusters, with deterministic faults."""

import json
import os
import threading
import time

import pytest

from kernel_session import KernelSession, kernel_with_cluster

pytestmark = pytest.mark.timeout(600)

STEPS = 8

SETUP = '''
import os, signal
import numpy as np

x = np.random.RandomState(0).uniform(0, 1, (256, 4)).astype("float32")
y = x.sum(axis=1, keepdims=True)
train = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).repeat()

def build():
    tf.keras.utils.set_random_seed(1)
    model = tf.keras.Sequential([tf.keras.layers.Dense(16, activation="relu", input_shape=(4,)),
                                 tf.keras.layers.Dense(1)])
    model.compile(optimizer=tf.keras.optimizers.Adam(0.01), loss="mse")
    return model

class Faults(tf.keras.callbacks.Callback):
    """Logs each epoch begun on rank 0; kills rank 1 once at each epoch in KILL_AT."""
    def on_epoch_begin(self, epoch, logs=None):
        if tfdist.rank == 0:
            with open(EPOCH_LOG, "a") as log:
                log.write(f"{epoch}\\n")
        marker = f"{EPOCH_LOG}.killed-{epoch}"
        if tfdist.rank == 1 and epoch in KILL_AT and not os.path.exists(marker):
            open(marker, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
'''


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    with kernel_with_cluster(str(tmp_path_factory.mktemp("ckpt-kernel"))) as session:
        yield session


def on_every_worker(kernel, expression):
    out = kernel.ok("import json\nfrom tfmw_notebook.magics.session import active_cluster as _c\n"
                    f"_c().run('_probe = {expression}', want_display=False)\n"
                    "print(json.dumps([_c().pull(['_probe'], rank=r)['_probe']"
                    " for r in range(2)]))")
    return json.loads(out.stdout.strip().splitlines()[-1])


def fit_with_faults(kernel, tmp_path, kill_at, max_restarts, epochs=6):
    log = str(tmp_path / "epochs.log")
    kernel.ok(f"%%tfdist\nEPOCH_LOG = {log!r}\nKILL_AT = {list(kill_at)!r}\n" + SETUP)
    kernel.ok("%%tfdist\nmodel = build()")
    run_dir = str(tmp_path / "run")
    out = kernel.execute(
        f"%%tfdist --max-restarts {max_restarts} --checkpoint-dir {run_dir}\n"
        f"history = model.fit(train, epochs={epochs}, steps_per_epoch={STEPS}, "
        "callbacks=[Faults()])", timeout=400)
    begun = [int(line) for line in open(log).read().split()]
    return out, begun, run_dir


def assert_exactly_trained(kernel, epochs, begun, restarts):
    assert (on_every_worker(kernel, "int(model.optimizer.iterations.numpy())")
            == [epochs * STEPS] * 2)
    # Every epoch was begun; epochs begun more than once: at most one per restart.
    assert sorted(set(begun)) == list(range(epochs))
    assert len(begun) - epochs <= restarts, begun


def test_killed_worker_at_epoch_3_of_6_resumes_from_backup(kernel, tmp_path):
    out, begun, run_dir = fit_with_faults(kernel, tmp_path, kill_at=[2], max_restarts=1)
    assert out.status == "ok", out.error_text + out.stderr
    assert "restart 1 of 1" in out.stderr and "worker 1" in out.stderr
    assert "resumed from the automatic backup: epoch 3" in out.stdout
    assert_exactly_trained(kernel, 6, begun, restarts=1)
    names = sorted(n for n in os.listdir(run_dir) if n.startswith("ckpt-"))
    assert names == [f"ckpt-{e:06d}" for e in range(1, 7)]
    # The run records how many workers wrote it.
    assert json.load(open(os.path.join(run_dir, "run.json")))["workers"] == 2


def test_a_second_fit_of_a_trained_model_is_not_called_resumed(kernel, tmp_path):
    """Its optimizer starts above step 0 because an earlier fit trained it, not because a
    backup was loaded: no "resumed" line (it said "resumed ... step 8" before)."""
    kernel.ok("%%tfdist\nEPOCH_LOG = '/dev/null'\nKILL_AT = []\n" + SETUP)
    kernel.ok("%%tfdist\nmodel = build()")
    fit = f"model.fit(train, epochs=1, steps_per_epoch={STEPS}, verbose=0)"
    kernel.ok(f"%%tfdist --no-checkpoint\n{fit}")
    out = kernel.ok(f"%%tfdist --no-checkpoint --max-restarts 1\n{fit}")
    assert "resumed" not in out.stdout, out.stdout
    assert (on_every_worker(kernel, "int(model.optimizer.iterations.numpy())")
            == [2 * STEPS] * 2)


def test_backup_every_alone_lets_the_cell_run_again_resume(kernel, tmp_path):
    """No --max-restarts: the kill fails the cell; run again with the same run directory,
    the fit resumes from the backup --backup-every asked for (it was not written before)."""
    log = str(tmp_path / "epochs.log")
    kernel.ok(f"%%tfdist\nEPOCH_LOG = {log!r}\nKILL_AT = [2]\n" + SETUP)
    kernel.ok("%%tfdist\nmodel = build()")
    cell = (f"%%tfdist --backup-every {STEPS} --checkpoint-dir {tmp_path / 'run'}\n"
            f"history = model.fit(train, epochs=4, steps_per_epoch={STEPS}, "
            "callbacks=[Faults()])")
    failed = kernel.execute(cell, timeout=300)
    assert failed.status == "error" and "died" in failed.error["evalue"], failed.error_text
    out = kernel.ok(cell, timeout=300)
    assert "resumed from the automatic backup: epoch 3" in out.stdout, out.stdout
    assert_exactly_trained(kernel, 4, [int(line) for line in open(log).read().split()],
                           restarts=1)


def test_two_kills_with_two_restarts(kernel, tmp_path):
    out, begun, _ = fit_with_faults(kernel, tmp_path, kill_at=[1, 4], max_restarts=2)
    assert out.status == "ok", out.error_text + out.stderr
    assert "restart 1 of 2" in out.stderr and "restart 2 of 2" in out.stderr
    assert_exactly_trained(kernel, 6, begun, restarts=2)


def test_out_of_restarts_fails_with_the_cause(kernel, tmp_path):
    out, _, _ = fit_with_faults(kernel, tmp_path, kill_at=[1, 2], max_restarts=1, epochs=4)
    assert out.status == "error"
    assert out.error["ename"] == "WorkerFailed" and "died" in out.error["evalue"]


def test_user_error_is_not_retried(kernel, tmp_path):
    kernel.ok("%%tfdist\n" + "EPOCH_LOG = '/dev/null'\nKILL_AT = []\n" + SETUP)
    out = kernel.execute("%%tfdist --max-restarts 2\nmodel_that_does_not_exist.fit(train)")
    assert out.status == "error"
    assert "NameError" in out.error["evalue"]
    assert "restart 1 of 2" not in out.stderr


def test_worker_killed_while_saving_leaves_only_complete_checkpoints(kernel, tmp_path):
    kernel.ok("%%tfdist\nEPOCH_LOG = '/dev/null'\nKILL_AT = []\n" + SETUP)
    kernel.ok("%%tfdist\nmodel = build()")
    run_dir = str(tmp_path / "run")
    # The chief dies in its background write of checkpoint 3, after writing its files,
    # before committing it. A commit on the training thread fails the cell otherwise.
    out = kernel.execute(
        f"%%tfdist --checkpoint-dir {run_dir}\n"
        "import threading\n"
        "import tfmw_notebook.protocol.checkpoints as _ckpt\n"
        "_commit = _ckpt.commit\n"
        "def _dying_commit(temp, run_dir, epoch):\n"
        "    assert threading.current_thread().name == 'tfmw-checkpoint-writer', 'in place'\n"
        "    if epoch == 3 and tfdist.is_chief:\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
        "    return _commit(temp, run_dir, epoch)\n"
        "_ckpt.commit = _dying_commit\n"
        f"model.fit(train, epochs=5, steps_per_epoch={STEPS})", timeout=300)
    assert out.status == "error" and "died" in out.error["evalue"], out.error

    listing = kernel.ok("from tfmw_notebook.protocol import checkpoints\n"
                        f"print([c.name for c in checkpoints.list_checkpoints({run_dir!r})])\n"
                        f"print(checkpoints.resolve({run_dir!r}).name)")
    assert listing.stdout.split("\n")[:2] == ["['ckpt-000001', 'ckpt-000002']", "ckpt-000002"]
    assert any(n.startswith(".tmp-") for n in os.listdir(run_dir))  # the cut-short save

    # The previous checkpoint still restores, identically on every worker.
    kernel.ok("%%tfdist\nEPOCH_LOG = '/dev/null'\nKILL_AT = []\n" + SETUP + "\nmodel = build()")
    out = kernel.ok("from tfmw_notebook.magics.session import active_cluster\n"
                    "print(active_cluster().restore_checkpoint("
                    f"{run_dir + '/ckpt-000002'!r}, 'model'))")
    digests = eval(out.stdout.strip().splitlines()[-1])
    assert len(digests) == 2 and digests[0] == digests[1]


def test_training_goes_on_while_the_chief_writes_and_the_cell_ends_with_every_checkpoint(
        kernel, tmp_path):
    """Checkpoint 1's write takes 3 s (its commit held on the chief): epoch 2 trains
    meanwhile, and the cell returns once all three are committed."""
    kernel.ok("%%tfdist\nEPOCH_LOG = '/dev/null'\nKILL_AT = []\n" + SETUP)
    kernel.ok("%%tfdist\nmodel = build()")
    run_dir = str(tmp_path / "run")
    kernel.ok(
        f"%%tfdist --checkpoint-dir {run_dir}\n"
        "import time\n"
        "import tfmw_notebook.protocol.checkpoints as _ckpt\n"
        "_commit, _times = _ckpt.commit, {}\n"
        "def _slow_commit(temp, run_dir, epoch):\n"
        "    if epoch == 1 and tfdist.is_chief:\n"
        "        time.sleep(3)\n"
        "        _times['commit 1'] = time.monotonic()\n"
        "    return _commit(temp, run_dir, epoch)\n"
        "_ckpt.commit = _slow_commit\n"
        "class _Begins(tf.keras.callbacks.Callback):\n"
        "    def on_epoch_begin(self, epoch, logs=None):\n"
        "        _times[f'epoch {epoch + 1}'] = time.monotonic()\n"
        f"model.fit(train, epochs=3, steps_per_epoch={STEPS}, verbose=0, callbacks=[_Begins()])\n"
        "_ckpt.commit = _commit\n"
        "_times['fit returned'] = time.monotonic()", timeout=300)
    from tfmw_notebook.protocol.checkpoints import TEMP_PREFIX, list_checkpoints

    # Listed as soon as the cell returned: checkpoint 1's commit, 3 s late, was waited for.
    assert [c.epoch for c in list_checkpoints(run_dir)] == [1, 2, 3]
    assert not [n for n in os.listdir(run_dir) if n.startswith(TEMP_PREFIX)]
    times = on_every_worker(kernel, "_times")[0]
    assert times["epoch 2"] < times["commit 1"], times   # trained while it wrote
    # ... and saved checkpoint 2 only then: one write in flight (one copy of the weights).
    assert times["commit 1"] < times["epoch 3"], times


def test_an_interrupt_while_the_chief_writes_lets_the_checkpoint_commit_first(kernel, tmp_path):
    """The restart after an interrupt ends the workers at once (busy in the cell, they get
    no signal): it waits for the chief's write under way, here held 4 s."""
    kernel.ok("%%tfdist\nEPOCH_LOG = '/dev/null'\nKILL_AT = []\n" + SETUP)
    kernel.ok("%%tfdist\nmodel = build()")
    run_dir, writing = str(tmp_path / "run"), str(tmp_path / "writing")

    def interrupt_while_writing():
        deadline = time.monotonic() + 120
        while not os.path.exists(writing) and time.monotonic() < deadline:
            time.sleep(0.05)
        kernel.interrupt()

    watcher = threading.Thread(target=interrupt_while_writing)
    watcher.start()
    out = kernel.execute(
        f"%%tfdist --checkpoint-dir {run_dir}\n"
        "import time\n"
        "import tfmw_notebook.protocol.checkpoints as _ckpt\n"
        "_commit = _ckpt.commit\n"
        "def _slow_commit(temp, run_dir, epoch):\n"
        "    if epoch == 1 and tfdist.is_chief:\n"
        f"        open({writing!r}, 'w').close()\n"
        "        time.sleep(4)\n"
        "    return _commit(temp, run_dir, epoch)\n"
        "_ckpt.commit = _slow_commit\n"
        f"model.fit(train, epochs=1000, steps_per_epoch={STEPS}, verbose=0)", timeout=300)
    watcher.join(timeout=30)
    assert out.status == "error" and "interrupted" in out.error["evalue"], out.error
    from tfmw_notebook.protocol.checkpoints import list_checkpoints

    assert 1 in [c.epoch for c in list_checkpoints(run_dir)], out.stderr
    assert "letting worker 0 finish writing its checkpoint" in out.stderr


def test_restored_weights_are_bit_identical_everywhere_and_in_the_notebook(kernel, tmp_path):
    kernel.ok("%%tfdist\nEPOCH_LOG = '/dev/null'\nKILL_AT = []\n" + SETUP + "\nmodel = build()")
    run_dir = str(tmp_path / "run")
    kernel.ok(f"%%tfdist --checkpoint-dir {run_dir}\n"
              f"model.fit(train, epochs=3, steps_per_epoch={STEPS})\n"
              "trained = model.get_weights()", timeout=300)
    kernel.ok("%%tfdist\nmodel = build()")  # fresh weights, different from the checkpoint
    out = kernel.ok(
        "import hashlib\nfrom tfmw_notebook.magics.session import active_cluster\n"
        "from tfmw_notebook.magics.checkpoint_loader import load_into_notebook\n"
        f"path = {run_dir + '/ckpt-000003'!r}\n"
        "workers = active_cluster().restore_checkpoint(path, 'model')\n"
        "here = load_into_notebook(path)\n"
        "d = hashlib.sha256()\n"
        "for w in here.get_weights():\n    d.update(w.tobytes())\n"
        "print(workers[0] == workers[1] == d.hexdigest())", timeout=120)
    assert out.stdout.strip().splitlines()[-1] == "True"
    same = on_every_worker(kernel, "all((a == b).all()"
                                   " for a, b in zip(model.get_weights(), trained))")
    assert same == [True, True]


def test_keep_last_and_keep_best_through_the_magic(kernel, tmp_path):
    kernel.ok("%%tfdist\nEPOCH_LOG = '/dev/null'\nKILL_AT = []\n" + SETUP + "\nmodel = build()")
    run_dir = str(tmp_path / "run")
    kernel.ok(f"%%tfdist --checkpoint-dir {run_dir} --keep-last 2 --keep-best 1 --monitor loss\n"
              f"h = model.fit(train, epochs=5, steps_per_epoch={STEPS})\n"
              "losses = h.history['loss']",
              timeout=300)
    losses = on_every_worker(kernel, "losses")[0]
    best = 1 + min(range(5), key=losses.__getitem__)
    kept = sorted(n for n in os.listdir(run_dir) if n.startswith("ckpt-"))
    assert kept == sorted({f"ckpt-{e:06d}" for e in (4, 5, best)})


def test_fresh_kernel_continues_a_run_with_resume_from_latest(tmp_path):
    first = KernelSession(cwd=str(tmp_path))
    try:
        first.ok("%load_ext tfmw_notebook\n%tfdist start -n 2", timeout=180)
        first.ok("%%tfdist\nEPOCH_LOG = '/dev/null'\nKILL_AT = []\n" + SETUP + "\nmodel = build()")
        first.ok(f"%%tfdist\nmodel.fit(train, epochs=3, steps_per_epoch={STEPS})", timeout=300)
        first.ok("%tfdist stop")
    finally:
        first.shutdown()

    second = KernelSession(cwd=str(tmp_path))
    try:
        second.ok("%load_ext tfmw_notebook\n%tfdist start -n 2", timeout=180)
        second.ok("%%tfdist\nEPOCH_LOG = '/dev/null'\nKILL_AT = []\n" + SETUP + "\nmodel = build()")
        out = second.ok(f"%%tfdist --resume-from latest\n"
                        f"h = model.fit(train, epochs=5, steps_per_epoch={STEPS})\n"
                        "done = [len(h.history['loss']), int(model.optimizer.iterations.numpy())]",
                        timeout=300)
        assert "resumed from ckpt-000003: epoch 3" in out.stdout
        assert on_every_worker(second, "done") == [[2, 5 * STEPS]] * 2
        runs = os.listdir(tmp_path / "tfdist_checkpoints")
        assert len(runs) == 1  # the run went on in its own directory
        names = sorted(n for n in os.listdir(tmp_path / "tfdist_checkpoints" / runs[0])
                       if n.startswith("ckpt-"))
        assert names == [f"ckpt-{e:06d}" for e in range(1, 6)]
        second.ok("%tfdist stop")
    finally:
        second.shutdown()


DISK_FILLER = '''
import numpy as np
x = np.random.RandomState(0).uniform(0, 1, (64, 400)).astype("float32")
data = tf.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(16).repeat()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Input((400,)), tf.keras.layers.Dense(400),
                                 tf.keras.layers.Dense(1)])   # ~0.64 MB per checkpoint
    model.compile(optimizer="sgd", loss="mse")
'''


@pytest.fixture
def small_disk(tmp_path):
    """A 4 MB tmpfs (root only): a few checkpoints fit, then the disk is full."""
    import shutil
    import subprocess

    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("mounting a small tmpfs needs root and mount(8)")
    mount_point = tmp_path / "small"
    mount_point.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount_point)],
                   check=True, timeout=30)
    try:
        yield str(mount_point)
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False, timeout=30)


def test_a_checkpoint_that_does_not_fit_is_absent_and_the_earlier_ones_load(tf_kernel,
                                                                           small_disk):
    from tfmw_notebook.protocol.checkpoints import TEMP_PREFIX, list_checkpoints

    tf_kernel.ok("%%tfdist --no-checkpoint\n" + DISK_FILLER)
    out = tf_kernel.execute(f"%%tfdist --checkpoint-dir {small_disk}\n"
                            "model.fit(data, epochs=8, steps_per_epoch=2, verbose=0)",
                            timeout=240)
    assert out.status == "error", out.stdout
    message = out.error["evalue"]
    assert "CheckpointDiskFull" in message and "did not fit" in message, message
    # Only the chief writes to the checkpoint disk (the others' copies go to their own
    # temp dirs), so a committed checkpoint is never the one reported as not fitting.
    assert "worker 0 failed" in message, message
    run_dir = small_disk   # --checkpoint-dir names the run directory itself
    assert f"the disk holding {run_dir} is full" in message, message
    saved = list_checkpoints(run_dir)
    assert saved, "the first checkpoints fit"
    failed = f"ckpt-{len(saved) + 1:06d}"
    assert f"{failed} did not fit" in message, message
    leftovers = [n for n in os.listdir(run_dir) if n.startswith(TEMP_PREFIX) or n == failed]
    assert leftovers == []     # nothing partial: not the failed one, no temp directory
    print(f"disk full: {len(saved)} checkpoints fit, {failed} did not")
    # Every checkpoint that was written loads, identically on both workers.
    tf_kernel.ok("%%tfdist --no-checkpoint\n" + DISK_FILLER)
    for info in saved:
        out = tf_kernel.ok("from tfmw_notebook import active_cluster\n"
                           f"active_cluster().restore_checkpoint({info.path!r}, 'model')")
        digests = eval(out.results[-1]["text/plain"])
        assert len(digests) == 2 and digests[0] == digests[1]
