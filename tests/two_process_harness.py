"""Two plain worker processes on localhost, with TF_CONFIG, saving from the same relative paths.

The launcher (`run_pair`) imports no TensorFlow: it starts this file twice as a worker
(`python two_process_harness.py worker '<json>'`), both in the same working directory, each with
a temp directory of its own (as our workers have: tempdirs.py), waits for both under a deadline
(kills them past it: nothing may hang), and returns what each reported and which files the
named paths hold. With `trace=True` each worker runs under strace, and the result says which
paths under the shared working directory each rank wrote.

A worker: `import tensorflow as tf`, `strategy = tf.distribute.MultiWorkerMirroredStrategy()`
first; then `chief_writes.install(is_chief=rank == 0, task_id=rank)` when `patched`; then each
scenario asked for, in turn (several share one pair of processes: TensorFlow's start-up is
~4 s): setup once, then `iterations` rounds of (barrier: a one-element all-reduce, as a
training step would be; the step: one save, and the read-back the code does after it), each
round's exception recorded, not raised, so that both ranks keep meeting at the barriers. Then
each worker lists its copies, calls `cleanup()` and says whether they are gone, and the
launcher lists the files at the named paths.

chief_writes.py is loaded from its file, not through the package: it uses the standard library
only. The Keras 3 fit scenarios import worker/corrections/keras3_corrections.py through the package.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
CHIEF_WRITES = os.path.join(REPO, "tfmw_notebook", "worker", "writes", "chief_writes.py")

# --- launcher ----------------------------------------------------------------------------------


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for sock in sockets:
        sock.bind(("127.0.0.1", 0))
    ports = [sock.getsockname()[1] for sock in sockets]
    for sock in sockets:
        sock.close()
    return ports


def run_pair(scenarios: str | list[str], workdir: str, rundir: str, *, iterations: int = 20,
             patched: bool = True, deadline: float = 90.0, trace: bool = False,
             env: dict[str, str] | None = None) -> dict:
    """Run `scenarios` one after the other (one pair of processes for all) on 2 workers in
    `workdir`, their shared working directory; logs, results and the workers' temp
    directories go to `rundir`; `env` adds to the workers' environment. Returns a summary."""
    if isinstance(scenarios, str):
        scenarios = [scenarios]
    os.makedirs(workdir, exist_ok=True)
    os.makedirs(rundir, exist_ok=True)
    ports = free_ports(2)
    cluster = {"worker": [f"localhost:{port}" for port in ports]}
    procs, started = [], time.monotonic()
    for rank in range(2):
        procs.append(_start_worker(scenarios, workdir, rundir, rank, cluster, iterations,
                                   patched, trace, env or {}))
    hung = _wait_all(procs, started + deadline)
    summary: dict[str, Any] = {
        "scenarios": scenarios, "patched": patched, "iterations": iterations, "hung": hung,
        "seconds": round(time.monotonic() - started, 1),
        "returncodes": [proc.returncode for proc in procs],
        "ranks": [_read_json(os.path.join(rundir, f"result{rank}.json")) for rank in range(2)],
        "named_files": list_files(workdir),
        "logs": [_tail(os.path.join(rundir, f"log{rank}.txt")) for rank in range(2)],
    }
    if trace:
        summary["writes"] = [sorted(traced_writes(os.path.join(rundir, f"strace{rank}.txt"),
                                                  workdir)) for rank in range(2)]
    return summary


def _start_worker(scenarios: list[str], workdir: str, rundir: str, rank: int, cluster: dict,
                  iterations: int, patched: bool, trace: bool,
                  extra_env: dict[str, str]) -> subprocess.Popen:
    temp = os.path.join(rundir, f"tmp{rank}")
    os.makedirs(temp, exist_ok=True)
    env = dict(os.environ, TMPDIR=temp, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="",
               TF_USE_LEGACY_KERAS="1", PYTHONUNBUFFERED="1",
               TF_CONFIG=json.dumps({"cluster": cluster,
                                     "task": {"type": "worker", "index": rank}}))
    env.update(extra_env)
    args = {"scenarios": scenarios, "rank": rank, "iterations": iterations, "patched": patched,
            "result": os.path.join(rundir, f"result{rank}.json")}
    command = [sys.executable, os.path.abspath(__file__), "worker", json.dumps(args)]
    if trace:
        command = ["strace", "-f", "-qq", "-y", "-o", os.path.join(rundir, f"strace{rank}.txt"),
                   "-e", "trace=" + ",".join(_TRACED)] + command
    with open(os.path.join(rundir, f"log{rank}.txt"), "w") as log:
        return subprocess.Popen(command, cwd=workdir, env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)


def _wait_all(procs: list[subprocess.Popen], until: float) -> bool:
    """Wait for every process until `until`; kill the ones still running then. True if any hung."""
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, until - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    hung = any(proc.poll() is None for proc in procs)
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)   # its own session: the worker and its children
            proc.wait()
    return hung


def _read_json(path: str) -> dict | None:
    try:
        with open(path) as file:
            return json.load(file)
    except (OSError, ValueError):
        return None


def _tail(path: str, lines: int = 15) -> str:
    try:
        with open(path, errors="replace") as file:
            return "".join(file.readlines()[-lines:])
    except OSError:
        return ""


def list_files(directory: str) -> list[str]:
    """Every file and directory under `directory`, relative to it (directories end with /)."""
    found = []
    for dirpath, dirnames, filenames in os.walk(directory):
        relative = os.path.relpath(dirpath, directory)
        for name in dirnames:
            found.append(os.path.normpath(os.path.join(relative, name)) + "/")
        for name in filenames:
            found.append(os.path.normpath(os.path.join(relative, name)))
    return sorted(found)


_TRACED = ("open", "openat", "creat", "rename", "renameat", "renameat2", "unlink", "unlinkat",
           "mkdir", "mkdirat", "rmdir", "truncate", "link", "linkat", "symlink")
_CALL = re.compile(r"^(?:\d+\s+)?(\w+)\((.*)\)\s+=\s+(-?\d+)")
_PATH = re.compile(r'(?:(?:\d+<([^>]*)>|AT_FDCWD),\s*)?"((?:[^"\\]|\\.)*)"')


def traced_writes(trace_file: str, workdir: str) -> set[str]:
    """Paths under `workdir` that the traced process created, opened for writing, renamed,
    truncated or removed (relative to `workdir`; directories it made or removed end with /),
    from an `strace -f -y` log."""
    workdir = os.path.realpath(workdir)
    written = set()
    try:
        with open(trace_file, errors="replace") as file:
            lines = file.read().splitlines()
    except OSError:
        return written
    for line in lines:
        match = _CALL.match(line)
        if not match or int(match.group(3)) < 0:
            continue
        call, arguments = match.group(1), match.group(2)
        if call in ("open", "openat") and not re.search(r"O_WRONLY|O_RDWR|O_CREAT|O_TRUNC",
                                                        arguments):
            continue
        for base, name in _PATH.findall(arguments):
            path = os.path.normpath(os.path.join(base or workdir, name))
            if path == workdir or path.startswith(workdir + os.sep):
                mark = "/" if call in ("mkdir", "mkdirat", "rmdir") else ""
                written.add(os.path.relpath(path, workdir) + mark)
    return written


# --- worker ------------------------------------------------------------------------------------


class Context:
    """What a scenario step sees: tf, the strategy, this rank, state kept between steps."""

    def __init__(self, tf: Any, strategy: Any, rank: int, patched: bool) -> None:
        self.tf, self.strategy, self.rank, self.patched = tf, strategy, rank, patched
        self.is_chief = rank == 0
        self.state: dict[str, Any] = {}
        self.read_errors: list[str] = []
        self.notes: dict[str, Any] = {}

    def barrier(self) -> None:
        if "barrier" not in self.state:
            tf, strategy = self.tf, self.strategy
            self.state["barrier"] = tf.function(lambda: strategy.reduce(
                "SUM", strategy.run(lambda: tf.constant(1.0)), axis=None))
        self.state["barrier"]()

    def read_error(self, iteration: int, message: str) -> None:
        self.read_errors.append(f"{iteration}: {message}")


def _tf_variables(ctx: Context) -> Any:
    if "ckpt" not in ctx.state:
        tf = ctx.tf
        with ctx.strategy.scope():
            ctx.state["v"] = tf.Variable(tf.zeros([256, 64]))
            ctx.state["step"] = tf.Variable(0)
        ctx.state["ckpt"] = tf.train.Checkpoint(v=ctx.state["v"], step=ctx.state["step"])
    return ctx.state["ckpt"]


def _advance(ctx: Context, iteration: int) -> None:
    ctx.state["v"].assign(ctx.tf.fill([256, 64], float(iteration + 1)))
    ctx.state["step"].assign(iteration + 1)


def _same_checkpoint(saved: str | None, latest: str | None) -> bool:
    return bool(saved and latest) and os.path.basename(saved) == os.path.basename(latest)


def step_checkpoint_save(ctx: Context, i: int) -> None:
    """A custom loop's `checkpoint.save(prefix)`, then restore the latest."""
    ckpt = _tf_variables(ctx)
    _advance(ctx, i)
    saved = ckpt.save("ckpts/ckpt")
    latest = ctx.tf.train.latest_checkpoint("ckpts")
    if not _same_checkpoint(saved, latest):
        ctx.read_error(i, f"latest_checkpoint gave {latest}, just saved {saved}")
    _restore_and_check(ctx, ckpt, latest, i)


def _restore_and_check(ctx: Context, ckpt: Any, path: str | None, i: int) -> None:
    if path is None:
        return
    ctx.state["v"].assign(ctx.tf.zeros([256, 64]))
    try:
        ckpt.restore(path).assert_existing_objects_matched()
    except Exception as error:   # noqa: BLE001 (a read that fails is what we count)
        ctx.read_error(i, f"restore: {type(error).__name__}: {str(error)[:200]}")
        return
    if int(ctx.state["step"].numpy()) != i + 1:
        ctx.read_error(i, f"restored step {int(ctx.state['step'].numpy())}, saved {i + 1}")


def step_chief_save_all_read(ctx: Context, i: int) -> None:
    """Only the chief saves; every worker then asks for the latest checkpoint and restores it:
    what a worker that read the chief's files (and not its own) would see after a save."""
    ckpt = _tf_variables(ctx)
    _advance(ctx, i)
    if ctx.is_chief:
        ckpt.save("ckpts/ckpt")
    latest = ctx.tf.train.latest_checkpoint("ckpts")
    if latest is None or not latest.endswith(f"-{i + 1}"):
        ctx.read_error(i, f"latest_checkpoint gave {latest}, the chief saved ckpt-{i + 1}")
    _restore_and_check(ctx, ckpt, latest, i)


def step_checkpoint_write(ctx: Context, i: int) -> None:
    """`checkpoint.write(path)` to the same path every time, then read it back."""
    ckpt = _tf_variables(ctx)
    _advance(ctx, i)
    path = ckpt.write("ckpts/fixed")
    ctx.state["v"].assign(ctx.tf.zeros([256, 64]))
    try:
        ckpt.read(path).assert_existing_objects_matched()
        if int(ctx.state["step"].numpy()) != i + 1:
            ctx.read_error(i, f"read step {int(ctx.state['step'].numpy())}, wrote {i + 1}")
    except Exception as error:   # noqa: BLE001
        ctx.read_error(i, f"read: {type(error).__name__}: {str(error)[:200]}")


def step_manager_save(ctx: Context, i: int) -> None:
    """`tf.train.CheckpointManager(max_to_keep=3).save()`, then restore its latest."""
    tf = ctx.tf
    ckpt = _tf_variables(ctx)
    if "manager" not in ctx.state:
        ctx.state["manager"] = tf.train.CheckpointManager(ckpt, "managed", max_to_keep=3)
    manager = ctx.state["manager"]
    _advance(ctx, i)
    saved = manager.save()
    for latest in (manager.latest_checkpoint, tf.train.latest_checkpoint("managed")):
        if not _same_checkpoint(saved, latest):
            ctx.read_error(i, f"latest gave {latest}, just saved {saved}")
    _restore_and_check(ctx, ckpt, manager.latest_checkpoint, i)


def step_manager_resume(ctx: Context, i: int) -> None:
    """A new CheckpointManager on the directory a previous job left: restore its latest."""
    tf = ctx.tf
    ckpt = _tf_variables(ctx)
    manager = tf.train.CheckpointManager(ckpt, "managed", max_to_keep=3)
    ctx.notes["latest"] = manager.latest_checkpoint
    manager.restore_or_initialize()
    ctx.notes["restored_step"] = int(ctx.state["step"].numpy())


def _tf_module(ctx: Context) -> Any:
    if "module" not in ctx.state:
        tf = ctx.tf
        with ctx.strategy.scope():
            module = tf.Module()
            module.v = tf.Variable(tf.zeros([256, 64]))
            module.f = tf.function(lambda x: x * tf.reduce_sum(module.v),
                                   input_signature=[tf.TensorSpec([], tf.float32)])
        ctx.state["module"] = module
    return ctx.state["module"]


def step_saved_model_save(ctx: Context, i: int) -> None:
    """`tf.saved_model.save(obj, path)` to the same path every time."""
    module = _tf_module(ctx)
    module.v.assign(ctx.tf.fill([256, 64], float(i + 1)))
    ctx.tf.saved_model.save(module, "exported")
    if i % 5 == 4:               # loading takes ~0.3 s: read back every fifth save
        try:
            loaded = ctx.tf.saved_model.load("exported")
            if float(loaded.v.numpy()[0, 0]) != i + 1:
                ctx.read_error(i, f"loaded {float(loaded.v.numpy()[0, 0])}, saved {i + 1}")
        except Exception as error:   # noqa: BLE001
            ctx.read_error(i, f"load: {type(error).__name__}: {str(error)[:200]}")


def _tf_keras_model(ctx: Context) -> Any:
    if "tfk" not in ctx.state:
        import tf_keras
        with ctx.strategy.scope():
            model = tf_keras.Sequential([tf_keras.layers.Dense(16, input_shape=(8,)),
                                         tf_keras.layers.Dense(1)])
            model.compile(optimizer="sgd", loss="mse")
        ctx.state["tfk"] = model
    return ctx.state["tfk"]


def _keras3_model(ctx: Context) -> Any:
    if "k3" not in ctx.state:
        import keras
        with ctx.strategy.scope():
            model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16),
                                      keras.layers.Dense(1)])
            model.compile(optimizer="sgd", loss="mse")
        ctx.state["k3"] = model
    return ctx.state["k3"]


def _set_weights(model: Any, value: float) -> None:
    model.set_weights([w * 0 + value for w in model.get_weights()])


def _first_weight(model: Any) -> float:
    return float(model.get_weights()[0].flat[0])


def _save_then_load(ctx: Context, i: int, model: Any, save: Callable[[], Any],
                    load: Callable[[], Any] | None, folder: str) -> None:
    os.makedirs(folder, exist_ok=True)    # Keras' writers need the directory, as code does
    _set_weights(model, i + 1.0)
    save()
    if load is None:
        return
    _set_weights(model, 0.0)
    try:
        loaded = load()
        got = _first_weight(loaded if hasattr(loaded, "get_weights") else model)
        if got != i + 1.0:
            ctx.read_error(i, f"loaded {got}, saved {i + 1.0}")
    except Exception as error:   # noqa: BLE001
        ctx.read_error(i, f"load: {type(error).__name__}: {str(error)[:200]}")


def step_tfk_model_save(ctx: Context, i: int) -> None:
    """tf-keras `model.save("models/m.keras")`, then load_model every fifth save."""
    import tf_keras
    model = _tf_keras_model(ctx)
    load = (lambda: tf_keras.models.load_model("models/m.keras")) if i % 5 == 4 else None
    _save_then_load(ctx, i, model, lambda: model.save("models/m.keras"), load, "models")


def step_tfk_save_weights_h5(ctx: Context, i: int) -> None:
    """tf-keras `model.save_weights("weights/w.weights.h5")` (tf-keras cannot load it back
    under MWMS: DESIGN.md fact 17)."""
    model = _tf_keras_model(ctx)
    _save_then_load(ctx, i, model, lambda: model.save_weights("weights/w.weights.h5"), None,
                    "weights")


def step_tfk_save_weights_tf(ctx: Context, i: int) -> None:
    """tf-keras `model.save_weights("weights/ckpt")` (TF format), then load_weights."""
    model = _tf_keras_model(ctx)
    _save_then_load(ctx, i, model, lambda: model.save_weights("weights/ckpt"),
                    lambda: model.load_weights("weights/ckpt"), "weights")


def step_tfk_savedmodel(ctx: Context, i: int) -> None:
    """tf-keras `model.save("models/sm")` (SavedModel format)."""
    model = _tf_keras_model(ctx)
    _save_then_load(ctx, i, model, lambda: model.save("models/sm"), None, "models")


def step_tutorial_write_filepath(ctx: Context, i: int) -> None:
    """The multi-worker tutorial's own answer (notebooks/02): write_filepath by hand, the
    non-chief removes its directory. It must keep working with the module installed."""
    model = _tf_keras_model(ctx)
    model_path = os.path.join("models", "keras-model")
    dirpath, base = os.path.split(model_path)
    if not ctx.is_chief:
        dirpath = os.path.join(dirpath, "workertemp_" + str(ctx.rank))
        ctx.tf.io.gfile.makedirs(dirpath)
    write_model_path = os.path.join(dirpath, base)
    _save_then_load(ctx, i, model, lambda: model.save(write_model_path), None, "models")
    if not ctx.is_chief:
        ctx.tf.io.gfile.rmtree(os.path.dirname(write_model_path))


def step_tfk_tutorial_newest_weights(ctx: Context, i: int) -> None:
    """TensorFlow's "Distributed training with Keras" tutorial on tf-keras: a fit saving
    `ckpt_{epoch:04d}.weights.h5` (weights only), then every worker loads the newest file of
    the directory and evaluates. Notes: the file, and a digest of the weights loaded."""
    import hashlib
    import pathlib

    import tf_keras
    model = _tf_keras_model(ctx)
    prefix = os.path.join("tutorial_ckpts", "ckpt_{epoch:04d}.weights.h5")
    _fit_tf_keras(ctx, tf_keras.callbacks.ModelCheckpoint(prefix, save_weights_only=True),
                  ctx.state["iterations"])
    latest = sorted(pathlib.Path("tutorial_ckpts").glob("*"))[-1]
    for variable in model.weights:       # what the load must bring back
        variable.assign(ctx.tf.zeros_like(variable))
    model.load_weights(latest)
    ctx.notes = {"latest": str(latest), "loss": model.evaluate(ctx.tf.ones([8, 8]),
                                                               ctx.tf.ones([8, 1]), verbose=0),
                 "weights": hashlib.sha256(b"".join(
                     w.tobytes() for w in model.get_weights())).hexdigest()}


def _fit_tf_keras(ctx: Context, callback: Any, epochs: int) -> None:
    tf = ctx.tf
    model = _tf_keras_model(ctx)
    data = tf.data.Dataset.from_tensor_slices((tf.ones([64, 8]), tf.ones([64, 1])))
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    data = data.repeat().batch(8).with_options(options)
    model.fit(data, epochs=epochs, steps_per_epoch=1, verbose=0, callbacks=[callback])


def step_tfk_model_checkpoint(ctx: Context, i: int) -> None:
    """One tf-keras fit with ModelCheckpoint: one save per epoch, `iterations` epochs."""
    import tf_keras
    callback = tf_keras.callbacks.ModelCheckpoint("mc/w-{epoch:02d}.weights.h5",
                                                  save_weights_only=True)
    _fit_tf_keras(ctx, callback, ctx.state["iterations"])


def step_tfk_backup_restore(ctx: Context, i: int) -> None:
    """One tf-keras fit with BackupAndRestore (kept: delete_checkpoint=False), one backup per
    epoch, `iterations` epochs."""
    import tf_keras
    callback = tf_keras.callbacks.BackupAndRestore("backup", delete_checkpoint=False)
    _fit_tf_keras(ctx, callback, ctx.state["iterations"])


def step_k3_model_save(ctx: Context, i: int) -> None:
    """Keras 3 `model.save("models/k3.keras")`, then load_model every fifth save."""
    import keras
    model = _keras3_model(ctx)
    load = (lambda: keras.models.load_model("models/k3.keras")) if i % 5 == 4 else None
    _save_then_load(ctx, i, model, lambda: model.save("models/k3.keras"), load, "models")


def step_k3_save_weights(ctx: Context, i: int) -> None:
    """Keras 3 `model.save_weights("weights/k3.weights.h5")`, then load_weights."""
    model = _keras3_model(ctx)
    _save_then_load(ctx, i, model, lambda: model.save_weights("weights/k3.weights.h5"),
                    lambda: model.load_weights("weights/k3.weights.h5"), "weights")


def step_k3_chief_save_all_load(ctx: Context, i: int) -> None:
    """Only the chief saves Keras 3 weights; every worker then loads them."""
    model = _keras3_model(ctx)
    save = (lambda: model.save_weights("weights/k3.weights.h5")) if ctx.is_chief else (
        lambda: None)
    _save_then_load(ctx, i, model, save, lambda: model.load_weights("weights/k3.weights.h5"),
                    "weights")


def _keras3_callback(ctx: Context, make: Callable[[], Any]) -> Any:
    """A Keras 3 callback driven by hand on a built model: Keras 3 cannot fit under MWMS
    here (DESIGN.md facts 1 and 16) without the corrections, which are not in the package."""
    if "callback" not in ctx.state:
        callback = make()
        callback.set_model(_keras3_model(ctx))
        callback.on_train_begin()
        ctx.state["callback"] = callback
        # A fit's first step (an all-reduce) separates every worker's on_train_begin (where
        # BackupAndRestore reads the chief's backup) from the chief's first save; without it
        # the chief could write while the other still reads (h5: unable to lock file).
        ctx.barrier()
    return ctx.state["callback"]


def step_k3_model_checkpoint(ctx: Context, i: int) -> None:
    """Keras 3 ModelCheckpoint's epoch-end save (`.weights.h5`, one file per epoch)."""
    import keras
    callback = _keras3_callback(ctx, lambda: keras.callbacks.ModelCheckpoint(
        "mc3/w-{epoch:02d}.weights.h5", save_weights_only=True))
    _set_weights(_keras3_model(ctx), i + 1.0)
    callback.on_epoch_end(i, {"loss": 1.0 / (i + 1)})


def step_k3_backup_restore(ctx: Context, i: int) -> None:
    """Keras 3 BackupAndRestore's epoch-end backup (the same files every epoch)."""
    import keras
    callback = _keras3_callback(ctx, lambda: keras.callbacks.BackupAndRestore("backup3"))
    _set_weights(_keras3_model(ctx), i + 1.0)
    callback.on_epoch_end(i, {"loss": 1.0})


def step_k3_backup_resume(ctx: Context, i: int) -> None:
    """A new Keras 3 BackupAndRestore on the backup a previous job left: restore it."""
    import keras
    model = _keras3_model(ctx)
    _set_weights(model, 0.0)
    callback = keras.callbacks.BackupAndRestore("backup3")
    callback.set_model(model)
    callback.on_train_begin()
    ctx.notes["initial_epoch"] = model._initial_epoch
    ctx.notes["restored_weight"] = _first_weight(model)
    ctx.barrier()                   # a fit's first step: see _keras3_callback
    callback.on_epoch_end(0, {"loss": 1.0})
    callback.on_train_end()     # a fit that ends removes the backup (each worker its own)


def step_k3_backup_resume_damaged(ctx: Context, i: int) -> None:
    """The previous job's backup was cut off mid-write, the one before it kept beside it
    (`double_checkpoint`, as the package's automatic backups do): every worker restores the
    one before. The chief repairs its directory (Keras' own fallback); the other worker reads
    the damaged file first, so it must fall back itself."""
    import keras
    model = _keras3_model(ctx)
    _set_weights(model, 0.0)
    callback = keras.callbacks.BackupAndRestore("backup3d", double_checkpoint=True)
    callback.set_model(model)
    if ctx.is_chief:
        ctx.barrier()               # the other worker has read the damaged backup
        callback.on_train_begin()
    else:
        callback.on_train_begin()
        ctx.barrier()
    ctx.notes["initial_epoch"] = model._initial_epoch
    ctx.notes["restored_weight"] = _first_weight(model)
    ctx.barrier()                   # a fit's first step: see _keras3_callback
    callback.on_train_end()


def _fit_keras3(ctx: Context, callbacks: list, epochs: int) -> Any:
    """A Keras 3 fit under MWMS, with the package's Keras 3 corrections (worker/
    keras3_corrections.py: without them Keras 3 cannot fit under MWMS, DESIGN.md fact 16)."""
    import keras
    from tfmw_notebook.worker.corrections import keras3_corrections
    keras3_corrections.apply()
    tf = ctx.tf
    model = _keras3_model(ctx)
    data = tf.data.Dataset.from_tensor_slices((tf.ones([64, 8]), tf.ones([64, 1])))
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    data = data.repeat().batch(8).with_options(options)
    first = keras.callbacks.LambdaCallback(
        on_epoch_begin=lambda epoch, logs: ctx.notes.setdefault("first_epoch", epoch))
    return model.fit(data, epochs=epochs, steps_per_epoch=1, verbose=0,
                     callbacks=[first, *callbacks])


def step_k3_fit_model_checkpoint(ctx: Context, i: int) -> None:
    """One Keras 3 fit with ModelCheckpoint: one `.weights.h5` per epoch."""
    import keras
    callback = keras.callbacks.ModelCheckpoint("mc3fit/w-{epoch:02d}.weights.h5",
                                               save_weights_only=True)
    _fit_keras3(ctx, [callback], ctx.state["iterations"])


class Interrupted(Exception):
    """Raised on every worker at the same epoch end, as a failed job would stop."""


def step_k3_fit_backup_interrupted(ctx: Context, i: int) -> None:
    """A Keras 3 fit with BackupAndRestore, stopped on every worker after half its epochs
    (the backup of that epoch written): the backup stays for the next job."""
    import keras
    epochs = ctx.state["iterations"]

    def stop(epoch: int, logs: Any) -> None:
        if epoch + 1 == epochs // 2:
            raise Interrupted(f"after epoch {epoch + 1}")
    try:
        _fit_keras3(ctx, [keras.callbacks.BackupAndRestore("backup3fit"),
                          keras.callbacks.LambdaCallback(on_epoch_end=stop)], epochs)
    except Interrupted as interruption:
        ctx.notes["interrupted"] = str(interruption)


def step_k3_fit_backup_resume(ctx: Context, i: int) -> None:
    """The next job: the same fit resumes from the chief's backup; when it ends, the backup
    is removed (the chief's by the chief, the other worker's copy by that worker)."""
    import keras
    _fit_keras3(ctx, [keras.callbacks.BackupAndRestore("backup3fit")], ctx.state["iterations"])
    ctx.notes["weight"] = _first_weight(_keras3_model(ctx))


# Scenarios whose one step makes all the saves (one fit, one save per epoch).
# Resumes are one step too.
ONE_STEP = {"tfk_model_checkpoint", "tfk_backup_restore", "tfk_tutorial_newest_weights",
            "k3_fit_model_checkpoint", "k3_fit_backup_interrupted", "k3_fit_backup_resume",
            "manager_resume", "k3_backup_resume", "k3_backup_resume_damaged"}
SCENARIOS: dict[str, Callable[[Context, int], None]] = {
    name[len("step_"):]: function for name, function in globals().items()
    if name.startswith("step_")}


def expected_files(scenario: str, iterations: int) -> set[str] | None:
    """What one process alone leaves at the named paths (None: not known here)."""
    numbered = range(1, iterations + 1)
    data = ".data-00000-of-00001"
    if scenario == "checkpoint_save":
        return ({"ckpts/", "ckpts/checkpoint"} | {f"ckpts/ckpt-{n}.index" for n in numbered}
                | {f"ckpts/ckpt-{n}{data}" for n in numbered})
    if scenario == "checkpoint_write":
        return {"ckpts/", "ckpts/fixed.index", f"ckpts/fixed{data}"}
    if scenario == "manager_save":
        kept = range(max(1, iterations - 2), iterations + 1)
        return ({"managed/", "managed/checkpoint"} | {f"managed/ckpt-{n}.index" for n in kept}
                | {f"managed/ckpt-{n}{data}" for n in kept})
    if scenario in ("tfk_model_checkpoint", "k3_model_checkpoint", "k3_fit_model_checkpoint"):
        folder = {"tfk_model_checkpoint": "mc", "k3_model_checkpoint": "mc3"}.get(scenario,
                                                                                "mc3fit")
        return {f"{folder}/"} | {f"{folder}/w-{n:02d}.weights.h5" for n in numbered}
    if scenario in ("saved_model_save", "tfk_savedmodel", "tutorial_write_filepath"):
        folder = {"saved_model_save": "exported", "tfk_savedmodel": "models/sm",
                  "tutorial_write_filepath": "models/keras-model"}[scenario]
        keras = {f"{folder}/keras_metadata.pb", "models/"} if folder != "exported" else set()
        return keras | {f"{folder}/", f"{folder}/assets/", f"{folder}/fingerprint.pb",
                        f"{folder}/saved_model.pb", f"{folder}/variables/",
                        f"{folder}/variables/variables.index",
                        f"{folder}/variables/variables{data}"}
    if scenario == "tfk_backup_restore":       # tf-keras keeps one backup, under chief/
        return {"backup/", "backup/chief/", "backup/chief/checkpoint",
                f"backup/chief/ckpt-{iterations}.index", f"backup/chief/ckpt-{iterations}{data}"}
    simple = {"tfk_model_save": {"models/", "models/m.keras"},
              "tfk_save_weights_h5": {"weights/", "weights/w.weights.h5"},
              "tfk_save_weights_tf": {"weights/", "weights/checkpoint", "weights/ckpt.index",
                                      f"weights/ckpt{data}"},
              "k3_model_save": {"models/", "models/k3.keras"},
              "k3_save_weights": {"weights/", "weights/k3.weights.h5"},
              "k3_backup_restore": {"backup3/", "backup3/latest.weights.h5",
                                    "backup3/training_metadata.json"},
              "k3_fit_backup_interrupted": {"backup3fit/", "backup3fit/latest.weights.h5",
                                            "backup3fit/training_metadata.json"},
              "k3_fit_backup_resume": set()}
    return simple.get(scenario)


def foreign_files(named_files: list[str]) -> list[str]:
    """Files at the named paths that only another worker, or a save in progress, leaves."""
    marks = ("workertemp", "_temp", ".tmp", "tfmw-chief-writes")
    return [path for path in named_files if any(mark in path for mark in marks)]


def _private_tempdir() -> str:
    """As tempdirs.use_private_tempdir does on our workers: a temp directory of this process."""
    path = os.path.join(tempfile.gettempdir(), f"tfmw-worker-{os.getpid()}")
    os.makedirs(path, exist_ok=True)
    tempfile.tempdir = path
    os.environ["TMPDIR"] = path
    return path


def _load_chief_writes() -> Any:
    from tfmw_notebook.worker.writes import chief_writes

    return chief_writes


def _run_scenario(tf: Any, strategy: Any, rank: int, args: dict, name: str) -> dict:
    """Setup, then the scenario's steps each after a barrier, each step's exception recorded."""
    ctx = Context(tf, strategy, rank, args["patched"])
    ctx.state["iterations"] = args["iterations"]
    step = SCENARIOS[name]
    errors: list[str] = []
    started = time.monotonic()
    for i in range(1 if name in ONE_STEP else args["iterations"]):
        ctx.barrier()
        try:
            step(ctx, i)
        except Exception as error:   # noqa: BLE001 (counted, and the barriers go on)
            errors.append(f"{i}: {type(error).__name__}: {str(error)[:300]}")
            if os.environ.get("HARNESS_TRACEBACKS"):
                traceback.print_exc()
    ctx.barrier()                    # both ranks are done writing
    return {"write_errors": errors, "read_errors": ctx.read_errors, "notes": ctx.notes,
            "seconds": round(time.monotonic() - started, 2)}


def worker_main(args: dict) -> None:
    private = _private_tempdir()
    import tensorflow as tf
    tf.config.threading.set_inter_op_parallelism_threads(1)   # 2 shared cores, 2 workers
    tf.config.threading.set_intra_op_parallelism_threads(1)
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    rank = args["rank"]
    chief_writes = None
    if args["patched"]:
        chief_writes = _load_chief_writes()
        chief_writes.install(is_chief=rank == 0, task_id=rank)
        from tfmw_notebook.worker.corrections import tf_keras_h5_loading
        tf_keras_h5_loading.install()        # as the workers' bootstrap does
    result: dict[str, Any] = {"rank": rank, "private_tempdir": private, "scenarios": {}}
    for name in args["scenarios"]:
        result["scenarios"][name] = _run_scenario(tf, strategy, rank, args, name)
    if chief_writes is not None:
        copies = chief_writes.copies_dir()
        result["copies_dir"] = copies
        result["copies"] = list_files(copies) if copies else []
        chief_writes.cleanup()
        result["copies_left_after_cleanup"] = bool(copies and os.path.exists(copies))
    with open(args["result"] + ".part", "w") as file:
        json.dump(result, file)
    os.replace(args["result"] + ".part", args["result"])
    # A rank that leaves right after the last all-reduce can cut its peer's pending receive
    # (seen: "Collective ops is aborted by: Socket closed"): leave once both have reported.
    others = [args["result"].replace(f"result{rank}.json", f"result{other}.json")
              for other in range(2)]
    until = time.monotonic() + 20
    while not all(os.path.exists(path) for path in others) and time.monotonic() < until:
        time.sleep(0.05)
    sys.stdout.flush()
    os._exit(0)   # MWMS' gRPC threads can hold a normal exit for seconds


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "worker":
        worker_main(json.loads(sys.argv[2]))
    else:
        scenario = sys.argv[1] if len(sys.argv) > 1 else "checkpoint_save"
        base = tempfile.mkdtemp(prefix="two-process-")
        print(json.dumps(run_pair(scenario, os.path.join(base, "work"),
                                  os.path.join(base, "run"), iterations=3), indent=1))
        shutil.rmtree(base, ignore_errors=True)
