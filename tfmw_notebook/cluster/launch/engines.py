"""The ipyparallel side: engine processes we start or attach to, kill and restart.

Knows nothing of TensorFlow. One ipyparallel Client per group for its whole
life: closing a client in a kernel that shares its zmq context while engines
restart can kill the kernel, and new engines simply register with the client we
have. The client is closed when a group we started stops.
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Collection, Sequence

import ipyparallel as ipp
from ipyparallel.cluster.launcher import SSHLauncher, ipengine_cmd_argv
from IPython.core.profiledir import ProfileDir, ProfileDirError
from IPython.paths import get_ipython_dir

from ...errors import BadArgument, ClusterSetupError
from ...protocol import worker_modules
from ...protocol.engine_standin import SOCKET_VARIABLE
from ...protocol.orphan_guard import launched_by_this_process
from ...protocol.tempdirs import remove_worker_tempdir
from .attached_standby import AttachedStandby, spare_launch
from .cluster_file import read_cluster
from .fork_server import STANDIN_COMMAND, ForkServer
from .launched_engines import ended_engines, stop_engine_sets
from .placement import launcher_name, placed
from .private_network import PrivateNetwork
from .retired_engines import RetiredEngines
from .standby import WarmStandby

_log = logging.getLogger("tfmw_notebook")
# The hub counts an engine as registered at its first heartbeat: with the default
# 3 s period that alone made start-up ~5 s slower. Beats are answered by zmq in a
# C thread, so a busy engine still answers; 20 misses (5 s) mark one dead.
# Schedulers as threads of the controller, not eight processes of their own: each would
# start an interpreter and import ipyparallel while the engines import TensorFlow.
_CONTROLLER_ARGS = ["--HeartMonitor.period=250", "--HeartMonitor.max_heartmonitor_misses=20",
                    "--IPController.use_threads=True"]
_CONTROLLER_COMMAND = [sys.executable, "-m", "tfmw_notebook.cluster.launch.controller"]
# Our engines: ipyparallel's, with TensorFlow's import begun at once (worker/boot/engine_main.py).
_ENGINE_COMMAND = [sys.executable, "-m", worker_modules.ENGINE_MAIN]
_PROBE_SECONDS = 3.0   # a connect to the controller that takes longer counts as no answer
# How often a wait for engines to register looks again: the client's own thread records
# each registration, so a look only copies its list; every worker waits on this one.
_REGISTRATION_POLL_SECONDS = 0.01
_SIGNAL_SECONDS = 5.0  # how long a nanny on another host gets to confirm a kill


def pid_alive(pid: int) -> bool:
    """True while `pid` runs on this host (a zombie counts as dead)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            # The state follows the parenthesised command name.
            return stat.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False
    except OSError:
        pass
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def nothing_listens(address: str, port: int, timeout: float = 1.0) -> bool:
    """True when `address` answers but refuses `port`: the process that listened there
    is gone while its host is up. A host that is down or cut off does not answer
    (False, after `timeout`)."""
    try:
        with socket.create_connection((address, port), timeout=timeout):
            return False
    except ConnectionRefusedError:
        return True
    except OSError:
        return False


def is_this_host(host: str) -> bool:
    return host == _this_hostname()


@functools.lru_cache(maxsize=1)
def _this_hostname() -> str:
    # Asked for every worker at every look of a cell's watch: a system call each time.
    return socket.gethostname()


class EngineGroup:
    """A set of engine ids on one controller, and the means to replace them."""

    def __init__(self, client: ipp.Client, cluster: ipp.Cluster | None, *, owned: bool):
        self.client = client
        self.cluster = cluster  # None when attached by url file only: cannot restart
        self.owned = owned      # we started controller and engines: we stop them
        self.ids: list[int] = []
        self._retired = RetiredEngines(self._engine_uuid)
        self._engine_kwargs: dict = {}  # how our engines were launched, to launch alike
        self._engine_argv: list[str] = list(ipengine_cmd_argv)
        self.url_file: str | None = None  # the connection file we attached by, if any
        self.network: PrivateNetwork | None = None  # our engines' private network, if any
        self.standby: WarmStandby | None = None  # spares for warm restarts (standby.py)
        self.forks: ForkServer | None = None  # where our engines are forked from, if any

    # -- start / attach -------------------------------------------------------

    @classmethod
    def start(cls, n: int, *, timeout: float, profile_dir: str | None = None,
              environment: dict[str, str] | None = None,
              network: PrivateNetwork | None = None, standby: int = 0) -> EngineGroup:
        """Start a controller and `n` local engines, all ended with this process.

        `environment`: set in each engine at launch; with it, engines start
        importing TensorFlow at once (see worker/boot/preimport.py). `network`: run the
        engines inside it, reaching the controller over Unix sockets (the group
        owns it from here on and closes it when it stops). `standby`: spares to keep
        once the workers are up (`fill_standby`).
        """
        kwargs = {"profile_dir": profile_dir} if profile_dir else {}
        controller_args, engine_argv, engine_kwargs = _launch_settings(
            environment, network, timeout)
        # ipyparallel's own warnings (engine logs of killed engines) would land in
        # the cell; we report failures ourselves. Engines read the controller's
        # connection file (they wait for it), so they can start before it exists.
        cluster = ipp.Cluster(n=n, delay=0, log_level=logging.ERROR,
                              controller_args=controller_args,
                              send_engines_connection_env=False, **kwargs)
        forks = _fork_server(cluster, network, engine_kwargs) if environment is not None \
            else None
        client = _start_engines_then_controller(cluster, n, engine_kwargs, network, forks)
        group = cls(client, cluster, owned=True)
        group._engine_kwargs = engine_kwargs
        group._engine_argv = engine_argv
        group.network = network
        group.forks = forks
        group.standby = WarmStandby(standby, cluster, engine_kwargs) if standby else None
        try:
            group.ids = group._wait_for_new_engines(n, time.monotonic() + timeout,
                                                    launched=set(cluster.engines))
        except (ClusterSetupError, KeyboardInterrupt):
            group.stop()
            raise
        return group

    @classmethod
    def attach(cls, *, profile: str | None, cluster_id: str | None, url_file: str | None,
               n: int | None, timeout: float, standby: int = 0,
               spare_environment: dict[str, str] | None = None) -> EngineGroup:
        """`standby`: spares to keep, launched through the cluster's launcher with
        `spare_environment` (attached_standby.py)."""
        client, cluster = _attached_client(profile, cluster_id, url_file, timeout)
        group = cls(client, cluster, owned=False)
        group.url_file = os.path.abspath(url_file) if url_file else None
        group.ids = _attached_workers(group, n, time.monotonic() + timeout)
        if standby:
            try:
                _keep_spares(group, standby, spare_environment or {})
            except BadArgument:
                _quietly(lambda: _close_client(client))   # nothing else was touched
                raise
        return group

    # -- liveness ---------------------------------------------------------------

    def registered(self) -> set[int]:
        return set(self.client.ids)

    def controller_address(self) -> tuple[str, int | None]:
        """Host and registration port of the controller, as the client reaches it."""
        return _host_and_port(getattr(self.client, "_config", {}).get("registration", "") or "")

    def controller_address_for_engines(self) -> tuple[str, int | None]:
        """How the engines reach the controller: (host, port), or (path, None) for the
        Unix socket they register at when they run in a private network."""
        host, port = self.controller_address()
        if self.network is None or port is None:
            return host, port
        # The controller gives engines and clients the same registration port number.
        return f"{self.network.socket_dir}/engine-{port}", None

    def controller_answers(self, timeout: float = _PROBE_SECONDS) -> bool:
        """Whether the controller still accepts connections (its process lives, its host
        is reachable). A plain TCP connect: the hub itself is never disturbed."""
        host, port = self.controller_address()
        if port is None:
            return True  # nothing to probe; the waits' own deadlines still hold
        try:
            with socket.create_connection((host, port), timeout=timeout):
                return True
        except OSError:
            return False

    def _wait_for_new_engines(self, n: int, deadline: float, *,
                              launched: Collection[str] = frozenset()) -> list[int]:
        """Ids of `n` engines new to this group. `launched`: the engine sets we just
        started; one whose process ends before it registers fails the wait at once."""
        new_engines = _new_engines_finder(self)
        while True:
            fresh = new_engines()
            if len(fresh) >= n:
                # The newest (ids grow): engines of a job just cancelled stay registered
                # until the hub's heartbeat notices (~30 s on a controller a user started).
                return fresh[-n:]
            if launched:
                _fail_if_launched_ended(self, launched, n)
            if time.monotonic() > deadline:
                raise ClusterSetupError(
                    f"only {len(fresh)} of {n} engines registered in time; "
                    f"raise `timeout=`, or check the engines' logs in {_log_dir(self)}")
            time.sleep(_REGISTRATION_POLL_SECONDS)

    def _engine_uuid(self, engine_id: int) -> str | None:
        """The hub's name for the engine registered under `engine_id` now, if any."""
        return getattr(self.client, "_engines", {}).get(engine_id)

    # -- kill / restart / stop --------------------------------------------------

    def kill(self, pids: dict[int, tuple[str, int]], unreachable: Collection[str] = ()) -> None:
        """SIGKILL the engines (a collective blocked in C++ ignores anything milder): `pids`
        maps engine id -> (host, pid); local ones are killed directly, remote ones through
        their nanny, unless on `unreachable` hosts (known lost)."""
        _kill(self.client, pids, unreachable)
        self._retired.add(pids)

    def can_restart(self) -> bool:
        if self.cluster is not None and not self.cluster.engines:
            self.cluster = _reloaded(self.cluster)
        return self.cluster is not None and bool(self.cluster.engines)

    def check_restartable(self, hosts: Sequence[str]) -> ipp.Cluster:
        """The cluster whose launcher starts engines again; else ClusterSetupError saying
        what to run where. `hosts`: where the old engines ran (one entry per engine)."""
        if not self.can_restart() or self.cluster is None:
            raise ClusterSetupError(
                "the engines of this attached cluster cannot be restarted from here (no "
                f"launcher known): {_bring_back(self.url_file, hosts)}")
        return self.cluster

    def restart(self, n: int, *, timeout: float, hosts: Sequence[str] = (),
                place: dict[str, int] | None = None,
                unreachable: Collection[str] = ()) -> list[int]:
        """`n` fresh engine processes (spares first, if any); returns their ids (`hosts`:
        see check_restartable). `place`: {host: count}, where the launcher is told to put
        them (placement.py); `unreachable`: hosts known lost (_forget_unreachable)."""
        cluster = self.check_restartable(hosts)
        self._retired.add(self.ids)
        self.ids = []
        deadline = time.monotonic() + timeout
        reopen = self.network is not None and not self.network.is_open()
        _end_old_engines(self, cluster, unreachable, reopen)
        try:
            _renew_launch_path(self, reopen)
            needed, old_sets = _launch_missing(self, cluster, n, place)
        except Exception as exc:  # the launcher's own failure: say whose it is
            raise ClusterSetupError(
                f"ipyparallel's {launcher_name(cluster)} could not start engines again "
                f"({exc!r}): "
                "start the cluster again (e.g. `ipcluster start`), then `TFCluster.attach()`"
            ) from None
        if needed:
            self.ids += self._wait_for_new_engines(
                needed, deadline, launched=set(cluster.engines) - old_sets)
        return self.ids

    def _taken(self) -> set[int]:
        return set(self.ids) | self._retired.ids()

    def fill_standby(self) -> None:
        """Launch the spares the pool lacks (standby.py): they register and import
        TensorFlow while the notebook goes on."""
        if self.standby is not None:
            self.standby.refill()

    def stop(self) -> None:
        if self.owned and self.cluster is not None:
            _quietly(self.cluster.stop_cluster_sync)
            _quietly(lambda: _close_client(self.client))
        elif isinstance(self.standby, AttachedStandby):
            self.standby.release(self.registered(), self._taken())   # our idle spares
        _close(self.network, self.forks)
        self.network, self.forks = None, None
        self.ids = []


def _host_and_port(url: str) -> tuple[str, int | None]:
    """('host', port) of a zmq url such as 'tcp://[::1]:5555'; ('127.0.0.1', None)
    where it names no host, the port None where it names none."""
    host, _, port = url.rsplit("//", 1)[-1].rpartition(":")
    if not host:
        return "127.0.0.1", None
    return host.strip("[]"), int(port) if port.isdigit() else None


def _start_engines_then_controller(cluster: ipp.Cluster, n: int, engine_kwargs: dict,
                                   network: PrivateNetwork | None,
                                   forks: ForkServer | None) -> ipp.Client:
    """Start `n` engines, then the controller, and connect a client to it. Engines first:
    their interpreter and TensorFlow start while the controller comes up, instead of after
    it. Where any of it fails, what started is stopped and `network` and `forks` closed."""
    try:
        cluster.start_engines_sync(n, **engine_kwargs)
        cluster.start_controller_sync(controller_cmd=_CONTROLLER_COMMAND,
                                      environment=launched_by_this_process())
        return cluster.connect_client_sync()
    except KeyboardInterrupt:
        _quietly(cluster.stop_cluster_sync)
        _close(network, forks)
        raise
    except Exception as exc:
        _quietly(cluster.stop_cluster_sync)
        _close(network, forks)
        raise ClusterSetupError(f"could not start ipyparallel engines: {exc}") from exc


def _attached_workers(group: EngineGroup, n: int | None, deadline: float) -> list[int]:
    """The engines an attached `group` takes as its workers: `n` new ones, or (`n` None)
    every engine registered, waiting for a first one where there is none yet."""
    if n is not None:
        return group._wait_for_new_engines(n, deadline)
    ids = sorted(group.client.ids)
    if not ids:
        group._wait_for_new_engines(1, deadline)
        ids = sorted(group.client.ids)
    return ids


def _new_engines_finder(group: EngineGroup) -> Callable[[], list[int]]:
    """A function listing the registered engines new to `group` now, by id.

    An engine started by mpiexec asks for its MPI rank as its id: once the engines of
    the job before have left the hub, the new ones get the same ids. New is therefore an
    id the group does not know (its workers and retired engines when asked), or one that
    now names another engine."""
    known = set(group.ids) | group._retired.ids()
    seen = {group._engine_uuid(engine_id) for engine_id in known} - {None}

    def new_engines() -> list[int]:
        return sorted(engine_id for engine_id in group.registered()
                      if engine_id not in known or group._engine_uuid(engine_id) not in seen)
    return new_engines


def _fail_if_launched_ended(group: EngineGroup, launched: Collection[str], n: int) -> None:
    """ClusterSetupError, at once, where a process of the engine sets `group` just
    `launched` ended before it registered: waiting for it could only time out."""
    ended = ended_engines(group.cluster, launched)
    if ended:
        raise ClusterSetupError(
            f"{len(ended)} of {n} engines ended before they registered; the last "
            f"line of one's log: {next(iter(ended.values()))!r} (the engines' "
            f"logs are in {_log_dir(group)})")


def _end_old_engines(group: EngineGroup, cluster: ipp.Cluster, unreachable: Collection[str],
                     reopen: bool) -> None:
    """End the engines a restart of `group` replaces: with spares, the old workers only
    (standby.py; spares in a network about to be `reopen`ed went with it), else every
    engine set of `cluster`. Hosts `unreachable` are not asked (_forget_unreachable)."""
    spares = group.standby
    _forget_unreachable(cluster, unreachable)
    if spares is not None:
        spares.stale |= reopen   # spares in the old network went with it
        group._retired.add(spares.end_old(group.registered(), group._taken(), unreachable))
    else:
        stop_engine_sets(cluster)


def _renew_launch_path(group: EngineGroup, reopen: bool) -> None:
    """What the engines `group` starts next run in: a new private network where its keeper
    was killed (`reopen`), and a fork server that fits (_renew_forks)."""
    if group.network is not None and reopen:
        group.network.reopen()   # its keeper was killed: a new private network
        group._engine_kwargs["engine_cmd"] = (group.network.command_prefix()
                                              + group._engine_argv)
    _renew_forks(group, reopen)


def _launch_missing(group: EngineGroup, cluster: ipp.Cluster, n: int,
                    place: dict[str, int] | None) -> tuple[int, set[str]]:
    """`n` workers for `group`, spares first: those up are its workers at once, those
    still coming are claimed, and the launcher starts the rest (placed by `place`).
    Returns how many workers are still to register, and the engine sets before the launch."""
    spares = group.standby
    needed, coming = n, 0
    if spares is not None:
        group.ids = spares.take(n, group.registered(), group._taken())
        needed = n - len(group.ids)
        coming = spares.claim_coming(needed, group.registered(), group._taken())
    old_sets = set(cluster.engines)
    if needed > coming:
        cluster.start_engines_sync(needed - coming,
                                   **group._engine_kwargs, **placed(cluster, place))
    return needed, old_sets


def _reloaded(cluster: ipp.Cluster) -> ipp.Cluster:
    """The cluster read from its file again. Attached while `ipcluster start` was still
    launching, its cluster file names the engine launcher only once the engines started."""
    try:
        # With its profile, so the launcher gets the profile's settings (SSH options).
        return read_cluster(cluster.profile_dir, cluster.cluster_id)
    except (OSError, ValueError) as exc:
        _log.warning("could not read %s again: %r", cluster.cluster_file, exc)
        return cluster


def _keep_spares(group: EngineGroup, size: int, environment: dict[str, str]) -> None:
    """Keep `size` spares for the attached `group`, launched through its cluster's launcher
    with `environment`; BadArgument where it has none. The cluster's engines that are not
    workers now are not ours to take."""
    if not group.can_restart() or group.cluster is None:
        raise BadArgument(
            "`standby` needs the attached cluster's launcher to start spare engines, and "
            "none is known (attached by its connection file, or its engines were started "
            "by hand): attach by profile to a cluster `ipcluster start` launched, or "
            "without standby")
    group._retired.add(group.registered() - set(group.ids))
    group.standby = AttachedStandby(size, group.cluster, spare_launch(group.cluster, environment),
                                    group.client)


def _log_dir(group: EngineGroup) -> str:
    profile_dir = getattr(group.cluster, "profile_dir", None)
    if profile_dir:
        return os.path.join(profile_dir, "log")
    return f"the log directory of ipyparallel profile {group.client.profile or 'default'!r}"


def _renew_forks(group: EngineGroup, reopened: bool) -> None:
    """A fork server for the engines `group` is about to start: a new one where the old
    one ended, is in a network gone, or has an environment the engines no longer get (the
    old engines are gone by now)."""
    old = group.forks
    environment = group._engine_kwargs.get("environment", {})
    if old is None or (old.is_running() and not reopened
                       and {**old.environment, **old.engine_environment()} == environment):
        return
    old.close()
    group.forks = None
    environment.pop(SOCKET_VARIABLE, None)
    assert group.cluster is not None
    group.forks = _fork_server(group.cluster, group.network, group._engine_kwargs)


def _kill(client: ipp.Client, pids: dict[int, tuple[str, int]],
          unreachable: Collection[str] = ()) -> None:
    remote = []
    for engine_id, (host, pid) in pids.items():
        if host in unreachable:
            continue   # its nanny cannot answer: asking costs _SIGNAL_SECONDS
        if is_this_host(host):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            remove_worker_tempdir(pid)   # a killed worker cannot clean up itself
        else:
            remote.append(engine_id)
    # Through their nannies. A host that is cut off never answers: wait a little, never
    # forever.
    known = set(client.ids)
    registered = [eid for eid in remote if eid in known]
    if not registered:
        return
    try:
        client.send_signal(signal.SIGKILL, targets=registered,
                           block=False).result(timeout=_SIGNAL_SECONDS)
    except Exception as exc:
        # A dead nanny usually means a dead engine already; say so in the log.
        _log.warning("could not signal engines %s through their nanny: %r", registered, exc)


def _forget_unreachable(cluster: ipp.Cluster, unreachable: Collection[str]) -> None:
    """Drop the SSH launchers of engines on hosts known lost from their engine sets: each
    stop through one would wait for ssh to give up on its host (ServerAliveInterval x
    ServerAliveCountMax with a shared connection, else the TCP connect timeout, minutes by
    default), then fail anyway. Workers cut off from their controller while running a cell
    end themselves (worker/liveness/controller_watch.py)."""
    if not unreachable:
        return
    for engine_set in cluster.engines.values():
        launchers = getattr(engine_set, "launchers", {})
        for key, launcher in list(launchers.items()):
            if isinstance(launcher, SSHLauncher) and launcher.hostname in unreachable:
                del launchers[key]


def relaunch_environment(group: EngineGroup, updates: dict[str, str]) -> None:
    """Engines `group` starts from now on get `updates` in their launch environment (if
    it launches them with one; others are given theirs at their bootstrap)."""
    kwargs = group._engine_kwargs
    if "environment" in kwargs:
        kwargs["environment"] = {**kwargs["environment"], **updates}
        if group.standby is not None:
            group.standby.stale = True   # launched with the environment before


def _attached_client(profile: str | None, cluster_id: str | None, url_file: str | None,
                     timeout: float) -> tuple[ipp.Client, ipp.Cluster | None]:
    """A client of a running cluster, and the cluster (None when known by url file only)."""
    if url_file:
        if not os.path.exists(url_file):
            raise ClusterSetupError(
                f"no connection file at {url_file}: pass the ipcontroller-client.json "
                "that `ipcontroller`/`ipcluster start` wrote"
            )
        return _connect(lambda: ipp.Client(url_file, timeout=timeout), url_file), None
    try:
        # Look the profile up without creating it (a typo must not leave a
        # new profile directory behind, as Cluster(profile=...) would).
        profile_dir = ProfileDir.find_profile_dir_by_name(
            get_ipython_dir(), profile or "default").location
        cluster = read_cluster(profile_dir, cluster_id or "")
    except (ProfileDirError, FileNotFoundError):
        where = f"profile {profile or 'default'!r}" + (
            f", cluster id {cluster_id!r}" if cluster_id else "")
        flags = (f" --profile {profile}" if profile else "") + (
            f" --cluster-id {cluster_id}" if cluster_id else "")
        raise ClusterSetupError(
            f"no running ipyparallel cluster found ({where}): start one with "
            f"`ipcluster start -n 2{flags}` or pass `cluster_id=` / `url_file=`"
        ) from None
    except ValueError as exc:
        raise ClusterSetupError(
            f"the cluster file in {profile_dir}/security cannot be read ({exc}): start "
            "the cluster again (`ipcluster start`), or attach with `url_file=`") from None
    client = _connect(lambda: cluster.connect_client_sync(timeout=timeout),
                      cluster.cluster_file)
    return client, cluster


def _bring_back(url_file: str | None, hosts: Sequence[str]) -> str:
    """What to run where to have engines again, for a group attached by url file."""
    if not url_file:
        return "start engines again with ipcluster/ipengine, then `TFCluster.attach()`"
    engine_file = os.path.join(os.path.dirname(url_file), "ipcontroller-engine.json")
    if not os.path.exists(engine_file):
        engine_file = "<the controller's ipcontroller-engine.json>"
    counts: dict[str, int] = {}
    for host in hosts:
        counts[host] = counts.get(host, 0) + 1
    where = "; ".join(f"on {host}, {count} x `ipengine --file={engine_file}`"
                      for host, count in counts.items()) or \
        f"on each host, `ipengine --file={engine_file}` once per worker"
    return f"{where}; then `TFCluster.attach(url_file={url_file!r})`"


def _launch_settings(environment: dict[str, str] | None, network: PrivateNetwork | None,
                     timeout: float):
    """(controller args, engine argv, engine launcher kwargs) for the engines we start."""
    controller_args = list(_CONTROLLER_ARGS)
    # With the environment TF needs at import, engines start importing it at once.
    engine_argv = ipengine_cmd_argv if environment is None else _ENGINE_COMMAND
    if network is not None:
        controller_args += ["--IPController.engine_transport=ipc",
                            f"--IPController.engine_ip={network.socket_dir}/engine"]
    engine_kwargs: dict = {"engine_cmd": (network.command_prefix() if network is not None
                                          else []) + engine_argv,
                           # ipyparallel waits 0.1 s between engines (0.7 s for the last
                           # of 8): each would start its TensorFlow import that much later.
                           "delay": 0}
    # Our engines end with this kernel: their guard watches the kernel named here.
    engine_kwargs["environment"] = {**(environment or {}), **launched_by_this_process()}
    # (__import__: the startup command runs in the user's namespace; bind nothing there)
    # (engine_main starts it first thing; a plain ipengine only here, once registered)
    startup = "__import__('tfmw_notebook.protocol.orphan_guard', fromlist=['start']).start()"
    # No nanny process per engine: it would start while TensorFlow is imported,
    # and engines we start are on this host, killed by pid (see kill()).
    # Engines start before the controller and wait for its connection file; by
    # default they give up after 10 s, which a loaded 2-core machine can exceed
    # while two engines import TensorFlow. Wait as long as the start may take.
    # Their registration too: an engine gives up after 5 s without the controller's reply
    # (measured: 2 of 128 engines started together on 2 cores ended so).
    # Warnings and errors only: ipyparallel's engine logs lines at DEBUG for every
    # message it handles, several per cell, each written to its log file.
    engine_kwargs["engine_args"] = [f"--IPEngine.startup_command={startup}",
                                    "--IPEngine.enable_nanny=False",
                                    f"--IPEngine.wait_for_url_file={timeout:g}",
                                    f"--IPEngine.timeout={timeout:g}",
                                    "--IPEngine.log_level=WARN"]
    return controller_args, engine_argv, engine_kwargs


def _fork_server(cluster: ipp.Cluster, network: PrivateNetwork | None,
                 engine_kwargs: dict) -> ForkServer | None:
    """Start the fork server our engines come from, and have them launched as its
    stand-ins (`engine_kwargs` changed in place); None where it cannot start."""
    prefix = network.command_prefix() if network is not None else []
    log_dir = os.path.join(cluster.profile_dir, "log")
    os.makedirs(log_dir, exist_ok=True)
    forks = ForkServer.start(engine_kwargs["environment"], prefix,
                             os.path.join(log_dir, f"tfmw-forks-{cluster.cluster_id}.log"))
    if forks is not None:
        engine_kwargs["environment"] = {**engine_kwargs["environment"],
                                        **forks.engine_environment()}
        engine_kwargs["engine_cmd"] = prefix + STANDIN_COMMAND
    return forks


def _connect(connect, where: str) -> ipp.Client:
    try:
        return connect()
    except (TimeoutError, OSError) as exc:
        raise ClusterSetupError(
            f"no ipyparallel controller answered for {where} ({exc}): is the cluster running? "
            "`ipcluster start` it first"
        ) from None


def _close_client(client: ipp.Client) -> None:
    """Close the client of a controller that is gone. Left open, its sockets would keep
    dialling the controller's old ports; a later controller that gets one of those ports
    then reaches this client, and every message it sends prints an "Invalid Signature"
    traceback into a cell (measured: 2 in 50 starts in one process)."""
    client.close(linger=0)


def _close(network: PrivateNetwork | None, forks: ForkServer | None = None) -> None:
    if forks is not None:
        _quietly(forks.close)
    if network is not None:
        _quietly(network.close)


def _quietly(action) -> None:
    try:
        action()
    except Exception:
        _log.debug("ignored error while stopping", exc_info=True)
