"""Turning engines into TensorFlow workers: the TF_CONFIG handshake, then the bootstrap.

Each engine reports the address and free port it can be reached on; each then
gets its rank's TF_CONFIG and builds the shared strategy. Every call waits on
*all* replies under one deadline, so a set-up error on any engine raises here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from . import tfconfig
from .engines import EngineGroup
from .errors import ClusterSetupError, remote_summary
from .tfconfig import EngineReport
from .worker.calls import call


@dataclass(frozen=True)
class Addressing:
    """Which address each worker advertises to the others. Default: the address of
    the interface that routes to the controller; `interface` names one instead
    (the same name on every host), `address_map` gives host -> address."""

    interface: str | None = None
    address_map: dict[str, str] | None = None


@dataclass
class Workers:
    """Ready workers, index = rank, and the TensorFlow version they run."""

    reports: list[EngineReport]
    tf_version: str


def call_each(group: EngineGroup, ids: list[int], module: str, function: str,
              args_per_engine: list[tuple], *, what: str, timeout: float) -> list:
    """Call module.function on each engine with its own args; all replies or an error."""
    client = group.client
    futures = [client[eid].apply_async(call, module, function, *args)
               for eid, args in zip(ids, args_per_engine)]
    deadline = time.monotonic() + timeout
    results = []
    for engine_id, future in zip(ids, futures):
        if not future.wait(max(0.0, deadline - time.monotonic())):
            raise ClusterSetupError(f"engine {engine_id} did not finish the {what} within "
                                    f"{timeout:g} s; raise --timeout or check that engine")
        try:
            results.append(future.get())
        except Exception as exc:
            raise ClusterSetupError(
                f"{what} failed on engine {engine_id}: {remote_summary(exc)}") from None
    return results


def make_workers(group: EngineGroup, *, communication: str, gpus_per_worker: int,
                 timeout: float, addressing: Addressing | None = None) -> Workers:
    """Handshake with every engine of `group`, then bootstrap each as its rank."""
    ids = group.ids
    addressing = addressing or Addressing()
    where = (group.controller_address()[0], addressing.interface, addressing.address_map)
    replies = call_each(group, ids, "tfmw_notebook.worker.handshake", "describe_engine",
                        [where] * len(ids), what="handshake", timeout=timeout)
    reports = [EngineReport(engine_id=eid, **reply) for eid, reply in zip(ids, replies)]
    try:
        reused = tfconfig.existing_workers(reports)
    except ValueError as exc:
        raise ClusterSetupError(str(exc)) from None
    if reused is not None:  # engines that already are workers keep their strategy
        version = call_each(group, [ids[0]], "tfmw_notebook.worker.bootstrap",
                            "tensorflow_version", [()], what="lookup", timeout=timeout)[0]
        return Workers(reused, version)
    try:
        ranked = tfconfig.order_ranks(reports)
        tfconfig.check_endpoints(ranked)
        tfconfig.check_reachable(ranked)
    except ValueError as exc:  # the engines' addresses cannot make a cluster
        raise ClusterSetupError(str(exc)) from None
    settings = [({
        "rank": rank,
        "world_size": len(ranked),
        "env": tfconfig.worker_environment(ranked, rank, gpus_per_worker=gpus_per_worker),
        "communication": communication,
        "controller": list(group.controller_address_for_engines()),
    },) for rank in range(len(ranked))]
    infos = call_each(group, [r.engine_id for r in ranked], "tfmw_notebook.worker.bootstrap",
                      "bootstrap", settings, what="bootstrap", timeout=timeout)
    return Workers(ranked, infos[0]["tf_version"])

