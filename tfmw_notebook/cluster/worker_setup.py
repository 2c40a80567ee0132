"""Turning engines into TensorFlow workers: the TF_CONFIG handshake, then the bootstrap.

Each engine reports the address and free port it can be reached on, and the GPUs it
may share; each then gets its rank's TF_CONFIG and GPUs (protocol/devices.py) and
builds the shared strategy. Every call waits on
*all* replies under one deadline, so a set-up error on any engine raises here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..errors import ClusterSetupError
from ..protocol import devices, tfconfig
from ..protocol.devices import GpusPerWorker
from ..protocol.tfconfig import EngineReport
from .cells.worker_calls import WorkerCalls
from .launch.engines import EngineGroup


@dataclass(frozen=True)
class Addressing:
    """Which address each worker advertises to the others. Default: the address of
    the interface that routes to the controller; `interface` names one instead
    (the same name on every host), `address_map` gives host -> address."""

    interface: str | None = None
    address_map: dict[str, str] | None = None


@dataclass
class Workers:
    """Ready workers, index = rank, and the TensorFlow and Keras they run ("2.21.0",
    "Keras 3.15.1" or "tf-keras 2.21.0")."""

    reports: list[EngineReport]
    tf_version: str
    keras: str


def make_workers(group: EngineGroup, *, communication: str, gpus_per_worker: GpusPerWorker,
                 timeout: float, addressing: Addressing | None = None,
                 keras: int = 2) -> Workers:
    """Handshake with every engine of `group`, then bootstrap each as its rank."""
    ids = group.ids
    addressing = addressing or Addressing()
    calls = WorkerCalls(group, timeout)
    replies = calls.describe_engines(ids, group.controller_address()[0], addressing.interface,
                                     addressing.address_map, gpus_per_worker)
    reports = [engine_report(eid, reply) for eid, reply in zip(ids, replies)]
    try:
        reused = tfconfig.existing_workers(reports)
    except ValueError as exc:
        raise ClusterSetupError(str(exc)) from None
    if reused is not None:  # engines that already are workers keep their strategy
        versions = calls.versions(ids[0])
        return Workers(reused, versions["tf_version"], versions["keras"])
    try:
        ranked = tfconfig.order_ranks(reports)
        tfconfig.check_endpoints(ranked)
        tfconfig.check_reachable(ranked)
        # Each worker's GPUs, before any TensorFlow sets up its devices.
        assigned = devices.assign_devices(ranked, gpus_per_worker)
    except ValueError as exc:  # the engines' addresses or GPUs cannot make a cluster
        raise ClusterSetupError(str(exc)) from None
    ranked = [dataclasses.replace(report, devices=visible)
              for report, visible in zip(ranked, assigned)]
    used = devices.resolve_communication(communication, assigned)
    settings = [{
        "rank": rank,
        "world_size": len(ranked),
        "env": tfconfig.worker_environment(ranked, rank, devices=assigned[rank], keras=keras),
        "keras": keras,
        "communication": used,
        "controller": list(group.controller_address_for_engines()),
    } for rank in range(len(ranked))]
    infos = calls.bootstrap([r.engine_id for r in ranked], settings)
    return Workers(ranked, infos[0]["tf_version"], infos[0]["keras"])


def engine_report(engine_id: int, reply: dict) -> EngineReport:
    """An engine's handshake reply as a report (its GPUs as hashable pairs)."""
    fields = {name: value for name, value in reply.items() if name != "gpus"}
    gpus = tuple((str(value), str(uuid)) for value, uuid in reply.get("gpus", ()))
    return EngineReport(engine_id=engine_id, gpus=gpus, **fields)
