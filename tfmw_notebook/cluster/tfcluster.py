"""TFCluster: the Python API under the magics.

Starts or attaches an ipyparallel engine group and turns each engine into one
TensorFlow worker (worker_setup.py), runs cells on all of them (cell_running.py),
and after a failure keeps the workers or brings the whole group back with its
state (recovery.py), because the others would stay blocked in their
collectives forever.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from ..errors import BadArgument
from ..protocol.checkpoints import DEFAULT_ROOT
from ..protocol.devices import AUTO, GpusPerWorker, check_gpus_per_worker, devices_line
from ..protocol.tempdirs import remove_worker_tempdir
from ..protocol.tfconfig import KERAS_VERSIONS, EngineReport, launch_environment
from .cell_running import CellRunning
from .cells.beat_jitter import BeatJitter
from .cells.cell_watch import RunResult
from .cells.restarts import Restarts
from .cells.shrink import unreachable_names
from .cells.state_log import KeptState, RestoreReport
from .launch import host_capacity
from .launch.engines import EngineGroup, is_this_host, pid_alive
from .launch.limits import DEFAULT_TIMEOUT, SILENCE_SECONDS
from .launch.private_network import network_for_workers
from .runs.run_history import RunHistory
from .runs.runs import Runs, list_runs
from .runs.sweep_trials import Sweeps
from .worker_access import WorkerAccess
from .worker_setup import Addressing, make_workers

COMMUNICATIONS = ("auto", "ring", "nccl")
DEFAULT_KERAS = 2   # tf.keras is tf-keras, `import keras` Keras 3: see docs/keras.md
# After one rank raised, how long the others get to finish before they are taken
# to be blocked in a collective (then the group is restarted).
ERROR_GRACE = 3.0

__all__ = ["TFCluster", "RunResult", "RemoteValue", "COMMUNICATIONS", "ERROR_GRACE"]


class RemoteValue:
    """The chief's last expression value, shown as a normal cell result."""

    def __init__(self, display: dict):
        self._data = display["data"]
        self._metadata = display.get("metadata") or {}

    def _repr_mimebundle_(self, include=None, exclude=None):
        return self._data, self._metadata

    def __repr__(self) -> str:
        return self._data.get("text/plain", "")


class TFCluster(CellRunning, Restarts, RunHistory, WorkerAccess, Sweeps):
    """A group of TensorFlow workers, one per ipyparallel engine.

    >>> with TFCluster.start(2) as cluster:
    ...     cluster.run("model.fit(...)")

    (or call `cluster.stop()` yourself).
    """

    last_restart_seconds = 0.0
    min_workers: int | None = None   # go on with this many when a host is lost (shrink.py)

    def __init__(self, group: EngineGroup, *, communication: str = "auto",
                 gpus_per_worker: GpusPerWorker = AUTO, timeout: float = DEFAULT_TIMEOUT,
                 addressing: Addressing | None = None, keras: int = DEFAULT_KERAS):
        self._group = group
        self.addressing = addressing or Addressing()
        self.keras = keras
        self.keras_version = ""   # what the workers run: "Keras 3.15.1", "tf-keras 2.21.0"
        self.communication = communication
        self.gpus_per_worker = gpus_per_worker
        self.timeout = timeout
        self.workers: list[EngineReport] = []  # index = rank
        self.tf_version = ""
        self.started_seconds = 0.0
        self.restarts = 0
        self._group_size = 0  # workers wanted, also while there are none
        # Pushes and successful cells that ran on the current workers, in order, and
        # their fits' end state: what a restart after a failure replays.
        self.kept = KeptState()
        self.error_grace = ERROR_GRACE
        self.silence = SILENCE_SECONDS  # a silent worker is looked at: the floor (beat_jitter.py)
        self.beat_jitter = BeatJitter()
        self.last_restore: RestoreReport | None = None
        self._running: str | None = None

    @property
    def restore_state(self) -> bool:
        """Keep each fit's end state and restore it after restarts (`%tfdist restore`)."""
        return self.kept.enabled

    @restore_state.setter
    def restore_state(self, on: bool) -> None:
        self.kept.enabled = bool(on)

    @property
    def owned(self) -> bool:
        """Whether stop() ends the engines (we started them) or only lets go of them."""
        return self._group.owned

    @property
    def in_private_network(self) -> bool:
        """Whether the workers run in a private network (started with isolation)."""
        return self._group.network is not None

    def controller_answers(self) -> bool:
        """Whether the ipyparallel controller still accepts connections."""
        return self._group.controller_answers()

    # -- construction -------------------------------------------------------

    @classmethod
    def start(cls, n: int = 2, *, timeout: float = DEFAULT_TIMEOUT, communication: str = "auto",
              gpus_per_worker: GpusPerWorker = AUTO, profile_dir: str | None = None,
              isolate: bool = True, keras: int = DEFAULT_KERAS, standby: int = 0) -> TFCluster:
        """Start `n` local engines and make each a worker.

        `isolate` (default): the workers' TensorFlow ports are in a private network
        (private_network.py). `keras`: 3 (`tf.keras` and `import keras` are Keras 3) or 2
        (`tf.keras` is tf-keras). `standby`: spare engines kept with TensorFlow imported,
        which a restart takes first (standby.py)."""
        _check_settings(n, timeout, communication, gpus_per_worker, keras, standby)
        too_many = host_capacity.problem(n, host_capacity.read_capacity(), spares=standby)
        if too_many:
            raise BadArgument(too_many)
        began = time.perf_counter()
        group = EngineGroup.start(n, timeout=timeout, profile_dir=profile_dir,
                                  environment=launch_environment(gpus_per_worker, keras),
                                  network=network_for_workers(isolate), standby=standby)
        return cls._bootstrapped(group, began, communication=communication,
                                 gpus_per_worker=gpus_per_worker, timeout=timeout, keras=keras)

    @classmethod
    def attach(cls, *, profile: str | None = None, cluster_id: str | None = None,
               url_file: str | None = None, n: int | None = None,
               timeout: float = DEFAULT_TIMEOUT, communication: str = "auto",
               gpus_per_worker: GpusPerWorker = AUTO, interface: str | None = None,
               address_map: dict[str, str] | None = None,
               keras: int = DEFAULT_KERAS, standby: int = 0) -> TFCluster:
        """Use the engines of an ipyparallel cluster that is already running.

        Each worker advertises the address of its interface that reaches the
        controller, unless `interface` (a name, the same on every host) or
        `address_map` ({hostname: address}) says otherwise. `standby`: spare engines
        launched through the cluster's launcher (attached_standby.py).
        """
        _check_settings(n if n is not None else 1, timeout, communication, gpus_per_worker,
                        keras, standby)
        began = time.perf_counter()
        group = EngineGroup.attach(profile=profile, cluster_id=cluster_id, url_file=url_file,
                                   n=n, timeout=timeout, standby=standby,
                                   spare_environment=launch_environment(gpus_per_worker, keras))
        return cls._bootstrapped(group, began, communication=communication,
                                 gpus_per_worker=gpus_per_worker, timeout=timeout,
                                 addressing=Addressing(interface, address_map), keras=keras)

    @classmethod
    def _bootstrapped(cls, group, began, **settings):
        cluster = cls(group, **settings)
        try:
            cluster._make_workers()
        except BaseException:
            group.stop()
            raise
        cluster.started_seconds = time.perf_counter() - began
        cluster._group_size = cluster.size
        return cluster

    def _make_workers(self) -> None:
        made = make_workers(self._group, communication=self.communication,
                            gpus_per_worker=self.gpus_per_worker, timeout=self.timeout,
                            addressing=self.addressing, keras=self.keras)
        self.workers, self.tf_version, self.keras_version = (made.reports, made.tf_version,
                                                             made.keras)
        self.beat_jitter = BeatJitter()   # measured anew on these workers
        self._group.fill_standby()   # after the workers, whose start it would slow

    def silence_limit(self) -> float:
        """Seconds a running worker may go without a beat before it is looked at."""
        return self.beat_jitter.threshold(self.silence)

    # -- running cells (run, run_once, diagnose: cell_running.py) -------------

    @property
    def size(self) -> int:
        return len(self.workers)

    def runs(self, root: str = DEFAULT_ROOT) -> Runs:
        """The recorded runs under `root` (one per fit of a %%tfdist cell), from disk."""
        return list_runs(root)

    # -- lifecycle -------------------------------------------------------------

    def replace_workers(self, size: int | None = None, place: dict[str, int] | None = None,
                        lost_hosts: Sequence[str] = ()) -> None:
        """Kill the workers and bootstrap new ones (running `self.keras`; `size` of them, else
        as many as before; `place`: {host: count} for launchers that place by host; nothing
        sent to `lost_hosts`); what they held is not brought back. Workers that cannot be
        replaced (attached by url file) are still killed: after a failure they sit blocked in
        collectives, of no use."""
        began = time.perf_counter()
        size = self._group_size = size or self.size or self._group_size
        hosts, unreachable = [w.host for w in self.workers], unreachable_names(
            self.workers, lost_hosts)
        self.stop_workers(lost_hosts)
        self.state_log.clear()  # a restore adds back what it replays
        self._group.restart(size, timeout=self.timeout, hosts=hosts, place=place,
                            unreachable=unreachable)
        self._make_workers()
        self.restarts += 1
        self.last_restart_seconds = time.perf_counter() - began

    def stop_workers(self, lost_hosts: Sequence[str] = ()) -> None:
        """Kill the workers and leave none: `restart` brings the group back later."""
        workers, self.workers = self.workers, []
        self._group.kill({w.engine_id: (w.host, w.pid) for w in workers},
                         unreachable_names(workers, lost_hosts))

    def stop(self) -> None:
        """End every engine process we started (attached clusters keep theirs)."""
        workers, self.workers = self.workers, []
        self.forget_state()
        self.kept.shards.close()
        self._group.stop()
        if self._group.owned:
            _end_for_good(self._group, workers)

    def __enter__(self) -> TFCluster:
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def describe(self) -> str:
        addresses = ", ".join(w.endpoint for w in self.workers)
        private = "; private network" if self.in_private_network else ""
        return (f"{self.size} workers ready ({addresses}{private}), TensorFlow "
                f"{self.tf_version}, {self.keras_version}, in {self.started_seconds:.1f} s; "
                f"{devices_line([w.devices for w in self.workers], self.communication)}")


def _end_for_good(group: EngineGroup, workers: list[EngineReport]) -> None:
    """After the launcher's stop: a worker stuck in C++ ignores its polite signals."""
    group.kill({w.engine_id: (w.host, w.pid) for w in workers
                if not is_this_host(w.host) or pid_alive(w.pid)})
    for worker in workers:   # also of those a launcher's SIGKILL ended
        if is_this_host(worker.host):
            remove_worker_tempdir(worker.pid)


def _check_settings(n, timeout, communication, gpus_per_worker, keras, standby=0) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise BadArgument(f"Invalid value for argument `n`. Received: n={n!r}. "
                          "Expected a whole number of workers >= 1")
    if isinstance(standby, bool) or not isinstance(standby, int) or standby < 0:
        raise BadArgument(f"Invalid value for argument `standby`. Received: standby="
                          f"{standby!r}. Expected a whole number of spare engines >= 0")
    if timeout <= 0:
        raise BadArgument(f"Invalid value for argument `timeout`. Received: "
                          f"timeout={timeout!r}. Expected seconds > 0")
    if communication not in COMMUNICATIONS:
        raise BadArgument(f"Invalid value for argument `communication`. Received: "
                          f"communication={communication!r}. Expected one of {COMMUNICATIONS}")
    try:
        check_gpus_per_worker(gpus_per_worker)
    except ValueError as exc:
        raise BadArgument(str(exc)) from None
    if keras not in KERAS_VERSIONS:
        raise BadArgument(f"Invalid value for argument `keras`. Received: keras={keras!r}. "
                          f"Expected one of {KERAS_VERSIONS}")
