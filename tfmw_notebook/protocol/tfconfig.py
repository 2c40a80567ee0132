"""Pure helpers for the TF_CONFIG handshake: rank order, TF_CONFIG, devices.

Nothing here talks to engines or imports TensorFlow, so it is unit-tested
on its own.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from .devices import HIDDEN, GpusPerWorker


@dataclass(frozen=True)
class EngineReport:
    """What one engine says about itself before TensorFlow is imported."""

    engine_id: int
    host: str
    address: str
    port: int
    pid: int
    worker_of: str | None = None  # TF_CONFIG (JSON) if the engine already is a worker
    batch_job: str | None = None  # e.g. "Slurm job 12" when a batch system started it
    # The GPUs this engine may share, as (CUDA_VISIBLE_DEVICES value, UUID) pairs: its
    # host's, or those its own CUDA_VISIBLE_DEVICES names (devices.py splits them).
    gpus: tuple[tuple[str, str], ...] = ()
    devices: str | None = None   # its CUDA_VISIBLE_DEVICES once it is a worker
    # The pid its launcher knows, where that is not `pid`: the stand-in of an engine
    # forked by the fork server (protocol/engine_standin.py), which ends as it ends.
    launched_as: int | None = None

    @property
    def endpoint(self) -> str:
        # IPv6 literals need brackets in gRPC targets.
        if ":" in self.address:
            return f"[{self.address}]:{self.port}"
        return f"{self.address}:{self.port}"


def order_ranks(reports: list[EngineReport]) -> list[EngineReport]:
    """Stable rank order: by host, then by engine id.

    Grouping by host keeps a host's workers on neighbouring ranks (which is what
    local device numbering expects); engine ids break ties so the order does not
    depend on which engine answered first.
    """
    ids = [r.engine_id for r in reports]
    if len(set(ids)) != len(ids):
        raise ValueError(f"duplicate engine ids in handshake: {sorted(ids)}")
    return sorted(reports, key=lambda r: (r.host, r.engine_id))


def existing_workers(reports: list[EngineReport]) -> list[EngineReport] | None:
    """The engines as the cluster they already form, if they all are its workers.

    Engines that served an earlier attach keep their strategy (it cannot be
    rebuilt in-process), so a new attach reuses them as they are. Returns None
    when no engine is a worker yet; raises ValueError for a mix.
    """
    configs = [json.loads(r.worker_of) if r.worker_of else None for r in reports]
    if not any(configs):
        return None
    workers = [c["cluster"]["worker"] for c in configs if c]
    indices = sorted(c["task"]["index"] for c in configs if c)
    if (None in configs or any(w != workers[0] for w in workers)
            or indices != list(range(len(workers[0])))):
        raise ValueError(
            "some of these engines already are TensorFlow workers of another cluster "
            "layout; restart the engines (e.g. `ipcluster stop` then `ipcluster start`), "
            "then attach again"
        )
    by_index: dict[int, EngineReport] = {}
    for report, config in zip(reports, configs):
        assert config is not None   # checked above: every engine is a worker
        index = config["task"]["index"]
        address, port = workers[0][index].rsplit(":", 1)
        by_index[index] = dataclasses.replace(report, address=address.strip("[]"),
                                              port=int(port))
    return [by_index[index] for index in range(len(reports))]


def check_endpoints(ranked: list[EngineReport]) -> None:
    """Two workers must never share an endpoint (that would deadlock TF)."""
    seen: dict[str, int] = {}
    for rank, report in enumerate(ranked):
        if report.endpoint in seen:
            raise ValueError(
                f"workers {seen[report.endpoint]} and {rank} both reported "
                f"{report.endpoint}; each worker needs its own address and port"
            )
        seen[report.endpoint] = rank


def check_reachable(ranked: list[EngineReport]) -> None:
    """Workers on several hosts must not advertise a loopback address (the others
    would dial themselves)."""
    if len({report.host for report in ranked}) < 2:
        return
    for rank, report in enumerate(ranked):
        if report.address.startswith("127.") or report.address in ("::1", "localhost"):
            raise ValueError(
                f"worker {rank} on {report.host} advertises {report.address}, which the "
                "other hosts cannot reach: pass --interface NAME (the interface the hosts "
                "share) or --address-map HOST=ADDRESS,..."
            )


def parse_address_map(text: str) -> dict[str, str]:
    """'host1=10.0.0.1,host2=10.0.0.2' -> {host: address}."""
    mapping = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        host, sep, address = item.partition("=")
        if not sep or not host.strip() or not address.strip():
            raise ValueError(f"{item!r} is not HOST=ADDRESS: write e.g. "
                             "--address-map node1=10.0.0.1,node2=10.0.0.2")
        mapping[host.strip()] = address.strip()
    if not mapping:
        raise ValueError("empty --address-map: write e.g. --address-map node1=10.0.0.1")
    return mapping


def tf_config(ranked: list[EngineReport], rank: int) -> dict[str, Any]:
    """The TF_CONFIG dict for one rank (all workers, no separate chief task)."""
    if not 0 <= rank < len(ranked):
        raise ValueError(f"rank {rank} out of range for {len(ranked)} workers")
    return {
        "cluster": {"worker": [r.endpoint for r in ranked]},
        "task": {"type": "worker", "index": rank},
    }


def local_ranks(ranked: list[EngineReport]) -> list[int]:
    """Each worker's index among the workers on its own host."""
    counts: dict[str, int] = {}
    result = []
    for report in ranked:
        result.append(counts.get(report.host, 0))
        counts[report.host] = result[-1] + 1
    return result


# Which Keras `tf.keras` is on the workers: 3 (as TensorFlow ships it; `import keras` is
# the same) or 2 (the tf-keras package). TensorFlow reads the choice at import.
KERAS_VERSIONS = (3, 2)


def keras_environment(keras: int) -> dict[str, str]:
    if keras not in KERAS_VERSIONS:
        raise ValueError(f"Invalid value for argument `keras`. Received: keras={keras!r}. "
                         f"Expected one of {KERAS_VERSIONS}")
    return {"TF_USE_LEGACY_KERAS": "1" if keras == 2 else "0"}


def launch_environment(gpus_per_worker: GpusPerWorker, keras: int = 2) -> dict[str, str]:
    """What every engine gets at launch, before ranks are known: everything TF reads at
    import, so TF can be imported early. GPUs are hidden here only when none are
    wanted; otherwise each worker's CUDA_VISIBLE_DEVICES is set at its bootstrap, after
    the handshake found the GPUs. That is still in time: TensorFlow's import loads no
    CUDA driver, which reads the variable when TF first lists its devices (as the
    strategy is created).
    """
    env = {**keras_environment(keras), "TF_CPP_MIN_LOG_LEVEL": "2"}
    if gpus_per_worker == 0:
        env["CUDA_VISIBLE_DEVICES"] = HIDDEN
    return env


# gRPC waits a whole second before it dials again a peer that refused it. At start-up
# one worker's server often comes up a moment after another first dials it, so the
# strategy's first handshake took a second longer in about half the starts (2 workers
# here: 2.65-2.84 s or 3.41-3.94 s). The first retry comes after 50 ms instead; later
# ones back off as before (TensorFlow caps them at a second).
GRPC_OPTIONS_VARIABLE = "TF_GRPC_DEFAULT_OPTIONS"
FAST_RECONNECT = {"grpc.initial_reconnect_backoff_ms": "50"}


def grpc_options(existing: str | None) -> str:
    """TF_GRPC_DEFAULT_OPTIONS for a worker: the engine's own value ("name=value,...")
    as it was, with FAST_RECONNECT's settings added where it does not set them."""
    items = [item for item in (existing or "").split(",") if item.strip()]
    named = {item.split("=", 1)[0].strip() for item in items}
    items += [f"{name}={value}" for name, value in FAST_RECONNECT.items() if name not in named]
    return ",".join(items)


def worker_environment(
    ranked: list[EngineReport], rank: int, *, devices: str = HIDDEN, keras: int = 2
) -> dict[str, str]:
    """Environment a worker needs before TensorFlow sets up its devices; `devices`:
    its CUDA_VISIBLE_DEVICES (devices.assign_devices)."""
    return {
        "TF_CONFIG": json.dumps(tf_config(ranked, rank)),
        **keras_environment(keras),
        "CUDA_VISIBLE_DEVICES": devices,
        # Quiet TF's C++ INFO/WARNING chatter, which N workers would repeat N times.
        "TF_CPP_MIN_LOG_LEVEL": "2",
    }
