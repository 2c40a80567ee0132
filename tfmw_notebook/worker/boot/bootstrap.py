"""Turn a fresh engine into a TensorFlow worker, once per engine process.

Order matters: the environment first (TF reads TF_USE_LEGACY_KERAS at import,
TF_CONFIG and CUDA_VISIBLE_DEVICES when the strategy makes it set up its devices),
then TensorFlow, then the one
MultiWorkerMirroredStrategy *before any other TF op* (collective ops cannot be
configured after the runtime has started).
"""

from __future__ import annotations

import atexit
import importlib.util
import json
import os
import socket
import time
from dataclasses import dataclass
from typing import Any

from ...protocol import startup_log
from ...protocol.tempdirs import remove_worker_tempdir, use_private_tempdir
from ...protocol.tfconfig import GRPC_OPTIONS_VARIABLE, grpc_options
from ..cells.context import WorkerContext
from ..common import identity, package_versions, shared_strategy
from ..corrections import (
    cross_replica_steps,
    keras_flavour,
    loop_batches,
    other_strategy_scope,
    saved_model_calls,
    tf_keras_h5_loading,
    tf_keras_saving_format,
)
from ..data import input_release
from ..experiments import chief_tracking, tracker_corrections
from ..fits import keras_hooks, preemption
from ..liveness import controller_watch
from ..liveness.reporting import EventPublisher
from ..writes import chief_writes, keras3_backup_commit, random_state_backup, shared_directories
from . import collector, deferred_imports, gpus, handshake


@dataclass
class Tempdir:
    """This worker's own temp directory (tempdirs.py), removed when the process ends."""

    path: str | None = None


_tempdir = Tempdir()


class WorkerSetupError(RuntimeError):
    """A worker cannot become a TensorFlow worker; the message says how to fix it."""


def check_packages(keras: int) -> str:
    """Fail with an actionable message when TensorFlow or the chosen Keras is missing."""
    host = socket.gethostname()
    if importlib.util.find_spec("tensorflow") is None:
        packages = "tensorflow tf-keras" if keras == 2 else "tensorflow"
        raise WorkerSetupError(
            f"TensorFlow is not installed in the engines' Python on {host}: "
            f"run `pip install {packages}` in that environment"
        )
    # Not imported yet: tensorflow, tensorflow-cpu, tf-nightly ... (package_versions.py).
    version = package_versions.installed_version("tensorflow") or "unknown"
    try:
        keras_flavour.check_installed(keras, version)
    except keras_flavour.KerasSetupError as exc:
        raise WorkerSetupError(str(exc)) from None
    return version


def bootstrap(settings: dict[str, Any]) -> dict[str, Any]:
    """Configure this engine as worker `settings["rank"]` and publish its names.

    `settings` holds: rank, world_size, env (str -> str), keras (3 or 2),
    communication ("auto" | "ring" | "nccl"), controller ([host, port] the notebook
    reaches it at). Returns facts for the status line.
    """
    started = time.perf_counter()
    if shared_strategy.shared_strategy() is not None:
        raise WorkerSetupError(
            "this engine is already a worker; restart the engines to reconfigure")
    devices_before = os.environ.get("CUDA_VISIBLE_DEVICES")
    _set_environment(settings["env"])
    keras = settings.get("keras", 2)
    check_packages(keras)
    tf, strategy = _start_tensorflow(devices_before, settings["env"].get("CUDA_VISIBLE_DEVICES"),
                                     settings.get("communication", "auto"))
    keras_flavour.prepare(keras)
    _correct_third_party_code(settings["rank"])
    _stop_on_sigterm()
    # The controller as this engine dials it (the notebook may see it at 127.0.0.1).
    controller_watch.install(*(handshake.own_controller_address() or settings.get("controller")
                               or (None, None)))
    publisher = _install_hooks(settings["rank"], settings["world_size"])
    _fill_namespace(tf, strategy, publisher, settings["rank"], settings["world_size"])
    collector.freeze_startup_objects()
    return {
        **versions(),
        "replicas": strategy.num_replicas_in_sync,
        "seconds": time.perf_counter() - started,
    }


def _start_tensorflow(devices_before: str | None, devices_wanted: str | None,
                      communication: str) -> tuple[Any, Any]:
    """TensorFlow imported, with the GPUs assigned still within its reach, and the one
    strategy made: (tf, strategy). TensorFlow's C++ start-up lines are kept quiet until
    the strategy has set up the devices, where they end."""
    # Engines started by others (attached) import TensorFlow here, for the first time.
    deferred_imports.install()
    with startup_log.quiet_startup():
        import tensorflow as tf

        _check_gpus(devices_before, devices_wanted)
        # MWMS logs every all-reduce it builds at INFO; N workers would repeat it.
        tf.get_logger().setLevel("WARNING")
        # TF's thread pools stay at their defaults: dividing the cores among co-located
        # workers was measured no faster and less steady (benchmarks/, --threads-experiment).
        strategy = _make_strategy(tf, communication)
    return tf, strategy


def versions() -> dict[str, str]:
    """TensorFlow's version and which Keras `tf.keras` is ('Keras 3.15.1', 'tf-keras ...')."""
    import tensorflow as tf

    return {"tf_version": tf.__version__, "keras": keras_flavour.describe()}


def _correct_third_party_code(rank: int) -> None:
    """Once the strategy exists: the corrections that let code written for one process run
    under it (each guarded: guarded_patches.py)."""
    cross_replica_steps.install()   # custom training loops
    loop_batches.split_cell_loops()
    tf_keras_h5_loading.install()
    tf_keras_saving_format.install()
    shared_directories.install()
    input_release.install()
    keras3_backup_commit.install()   # before chief_writes: its redirection wraps this
    random_state_backup.install()    # so does this, which wraps the commit
    chief_writes.install(is_chief=rank == 0, task_id=rank)
    chief_tracking.install(is_chief=rank == 0)
    tracker_corrections.install()
    saved_model_calls.apply()
    other_strategy_scope.install()


def _set_environment(env: dict[str, str]) -> None:
    """What TensorFlow reads (TF_CONFIG, TF_USE_LEGACY_KERAS, ...), and a private tempdir."""
    os.environ.update(env)
    if env.get("CUDA_VISIBLE_DEVICES", "-1") != "-1":
        # Count GPUs as nvidia-smi and NVML do (the handshake's numbers), unless the
        # engine's environment says otherwise; CUDA's default puts the fastest first.
        os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    # Read by TensorFlow when it opens its first channel (creating the strategy).
    os.environ[GRPC_OPTIONS_VARIABLE] = grpc_options(os.environ.get(GRPC_OPTIONS_VARIABLE))
    _tempdir.path = use_private_tempdir()
    atexit.register(remove_worker_tempdir, os.getpid(), _tempdir.path)


def _check_gpus(before: str | None, wanted: str | None) -> None:
    """The GPUs assigned still reach TensorFlow (it may have been imported early, by
    preimport.py, but must not have set up its devices yet)."""
    try:
        gpus.check_still_assignable(before, wanted)
    except gpus.GpuProblem as exc:
        raise WorkerSetupError(str(exc)) from None


def _make_strategy(tf: Any, communication: str) -> Any:
    """The one MultiWorkerMirroredStrategy, made before any other TF op and shared
    with every cell that builds its own (shared_strategy.py)."""
    implementation = {
        "auto": tf.distribute.experimental.CommunicationImplementation.AUTO,
        "ring": tf.distribute.experimental.CommunicationImplementation.RING,
        "nccl": tf.distribute.experimental.CommunicationImplementation.NCCL,
    }[communication]
    strategy = tf.distribute.MultiWorkerMirroredStrategy(
        communication_options=tf.distribute.experimental.CommunicationOptions(
            implementation=implementation
        )
    )
    shared_strategy.install(strategy)
    return strategy


def _install_hooks(rank: int, world_size: int) -> EventPublisher:
    """Keras' fit/evaluate get this worker's callbacks (keras_hooks.py); their events
    go out through the returned publisher."""
    publisher = _event_publisher(rank)
    identity.install(rank)
    keras_hooks.install(publisher, rank=rank, is_chief=rank == 0, world_size=world_size)
    return publisher


def _fill_namespace(tf: Any, strategy: Any, publisher: EventPublisher, rank: int,
                    world_size: int) -> None:
    """The names every cell sees: tf, strategy and tfdist (context.py)."""
    context = WorkerContext(
        rank=rank,
        world_size=world_size,
        host=socket.gethostname(),
        tf_config=json.loads(os.environ["TF_CONFIG"]),
        _publish=publisher.emit,
    )
    _user_namespace().update(tf=tf, strategy=strategy, tfdist=context)


def _stop_on_sigterm() -> None:
    """Exit at once on SIGTERM: TF's threads otherwise keep a stopping engine
    alive until its launcher's SIGKILL, seconds later. A fit that backs up on a
    preemption gets its grace period first (preemption.py)."""
    import signal
    import threading

    def exit_now():
        remove_worker_tempdir(os.getpid(), _tempdir.path)   # os._exit skips atexit
        os._exit(0)

    def stop(signum, frame):
        preemption.on_sigterm(exit_now)

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, stop)


def _event_publisher(rank: int) -> EventPublisher:
    """Events go to the notebook through ipyparallel's data channel, which
    reaches the client while the cell is still running."""
    from ipyparallel.datapub import publish_data

    return EventPublisher(publish_data, rank)


def _user_namespace() -> dict:
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None:
        raise WorkerSetupError("bootstrap must run inside an ipyparallel engine")
    return shell.user_ns
