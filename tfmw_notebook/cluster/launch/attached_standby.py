"""Warm standby for an attached cluster: spares launched through the cluster's own launcher.

A cluster a user started (`ipcluster start` with local, SSH, Slurm or MPI engines) has its
workers restarted through the launcher its profile names (EngineGroup.restart). Spares are
launched the same way, with what TensorFlow reads at import (the Keras and logging
variables) in their environment and a startup command that begins that import as soon as
they have registered; a restart then takes them as WarmStandby does on this host.

What differs from the spares of `%tfdist start`: not every idle engine of the cluster is
ours (those it had before the attach are the group's retired ones, see EngineGroup.attach);
a spare may sit on a host that was lost; and letting go of the cluster ends only our idle
spares, shut down through the controller (which reaches every launcher's engines). The
workers made of spares stay, like the cluster's other engines.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Collection

import ipyparallel as ipp

from ...protocol import worker_modules
from .launched_engines import stop_engine_sets
from .placement import configured, launcher_name
from .standby import WarmStandby

_log = logging.getLogger("tfmw_notebook")
# (__import__: the startup command runs in the engine's namespace; bind nothing there)
PREIMPORT_COMMAND = worker_modules.startup_import(worker_modules.PREIMPORT)
_WHERE_SECONDS = 5.0   # how long a spare gets to say which host it is on


def spare_launch(cluster: ipp.Cluster, environment: dict[str, str]) -> dict:
    """Keyword arguments for `cluster.start_engines` that launch warm spares: the profile's
    own engine arguments and environment, and ours after them. (The SSH launcher exports the
    environment on each host, sbatch's `--export=ALL` hands it to the job; Open MPI passes
    the engines on other hosts only the variables `-x` names.)"""
    arguments = list(configured(cluster, "engine_args") or [])
    launch = {"engine_args": arguments + [f"--IPEngine.startup_command={PREIMPORT_COMMAND}"],
              "environment": {**(configured(cluster, "environment") or {}), **environment}}
    if "mpi" in launcher_name(cluster).lower():
        launch["mpi_args"] = list(configured(cluster, "mpi_args") or []) + [
            part for name in environment for part in ("-x", name)]
    return launch


class AttachedStandby(WarmStandby):
    """K spares of an attached `cluster`, reached through `client`."""

    def __init__(self, size: int, cluster: ipp.Cluster, launch_kwargs: dict,
                 client: ipp.Client):
        super().__init__(size, cluster, launch_kwargs)
        self._client = client

    def end_old(self, registered: Collection[int], taken: Collection[int],
                unreachable: Collection[str] = ()) -> set[int]:
        """After the workers were killed: stop the engine sets they ran in (every set but
        the spares'). Stale spares end too, and those on `unreachable` hosts (or silent)
        are left out. Returns the ids of the spares no restart may take."""
        if self.stale:
            ended = self.release(registered, taken)
            self.sets = []   # so their sets are stopped below: their workers are dead too
        else:
            ended = self._on_hosts(self.spares(registered, taken), unreachable)
            self._expected = max(0, self._expected - len(ended))
        stop_engine_sets(self._cluster, [set_id for set_id in self._cluster.engines
                                         if set_id not in self.sets])
        return ended

    def release(self, registered: Collection[int], taken: Collection[int]) -> set[int]:
        """Shut the spares not taken down (their sets end once their engines have); returns
        their ids."""
        idle = set(self.spares(registered, taken))
        if idle:
            try:
                self._client.shutdown(targets=sorted(idle), block=False)
            except Exception as exc:
                _log.warning("shutting down spare engines %s: %r", sorted(idle), exc)
        self._expected, self.stale = 0, False
        return idle

    def _on_hosts(self, spares: list[int], hosts: Collection[str]) -> set[int]:
        """Of `spares`, those on `hosts`, and those that do not say where they are in time:
        a host that was cut off keeps its engines registered until the controller notices."""
        if not spares or not hosts:
            return set()
        asked = {engine_id: self._client[engine_id].apply_async(socket.gethostname)
                 for engine_id in spares}
        deadline = time.monotonic() + _WHERE_SECONDS
        out = set()
        for engine_id, future in asked.items():
            if not future.wait(max(0.0, deadline - time.monotonic())):
                out.add(engine_id)
                continue
            try:
                if future.get() in hosts:
                    out.add(engine_id)
            except Exception:
                out.add(engine_id)
        return out
