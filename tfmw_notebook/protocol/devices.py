"""Which GPUs each worker gets: each host's GPUs split evenly among its workers.

Pure functions of what the engines reported in the handshake (EngineReport.gpus:
the GPUs an engine may share, as (CUDA_VISIBLE_DEVICES value, UUID) pairs); the
result is each worker's CUDA_VISIBLE_DEVICES, "-1" for the CPU. Never two workers
on one GPU: a split that is uneven or too small raises DeviceSplitError, one line
that says what to pass instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

AUTO = "auto"
HIDDEN = "-1"   # CUDA_VISIBLE_DEVICES that hides every GPU
GpusPerWorker = int | str   # a count, or AUTO


class DeviceSplitError(ValueError):
    """The GPUs cannot be split as asked; the message says what to pass instead."""


class _Reported(Protocol):
    """What the split reads of an EngineReport."""

    @property
    def host(self) -> str: ...

    @property
    def gpus(self) -> tuple[tuple[str, str], ...]: ...


def check_gpus_per_worker(value: object) -> GpusPerWorker:
    """`value` if it is "auto" or a whole number >= 0, else ValueError (keras' style)."""
    if value == AUTO or (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
        return value
    raise ValueError(f"Invalid value for argument `gpus_per_worker`. Received: "
                     f"gpus_per_worker={value!r}. Expected 'auto' or a whole number >= 0")


def _share_groups(ranked: Sequence[_Reported]) -> dict[tuple[str, frozenset[str]], list[int]]:
    """Ranks that share one set of GPUs: same host, same GPUs seen. Engines of one host
    that see different GPUs (a batch system gave each task its own) are split apart."""
    groups: dict[tuple[str, frozenset[str]], list[int]] = {}
    for rank, report in enumerate(ranked):
        key = (report.host, frozenset(uuid or value for value, uuid in report.gpus))
        groups.setdefault(key, []).append(rank)
    seen: dict[str, list[frozenset[str]]] = {}
    for host, gpus in groups:
        for other in seen.setdefault(host, []):
            if gpus & other:
                raise DeviceSplitError(
                    f"the engines on host {host} see overlapping but different GPUs (their "
                    "CUDA_VISIBLE_DEVICES differ): give them all the same value, or each "
                    "its own GPUs, or pass --gpus-per-worker 0 for the CPU")
        seen[host].append(gpus)
    return groups


def _other_count(host: str, workers: int, total: int, wanted: int) -> str:
    """How to ask for `wanted` workers on `host`, for an error message."""
    if workers == total:
        return f"-n {wanted}"
    return f"-n {total - workers + wanted} with {wanted} workers on {host}"


def _auto_share(host: str, gpus: int, workers: int, total: int) -> int:
    """GPUs per worker when `workers` workers share `gpus` GPUs evenly."""
    if gpus == 0:
        return 0
    if gpus % workers == 0:
        return gpus // workers
    fewer = (f"--gpus-per-worker {gpus // workers} (leaves {gpus % workers} idle), "
             if gpus > workers else "")
    raise DeviceSplitError(
        f"host {host} has {gpus} GPU{'s' * (gpus != 1)} for {workers} workers, which do not "
        f"split evenly (never two workers on one GPU): pass {fewer}"
        f"{_other_count(host, workers, total, gpus)} (one GPU each), or --gpus-per-worker 0 "
        "to train on the CPU")


def _checked_share(host: str, gpus: int, workers: int, total: int, each: int) -> int:
    """`each` GPUs per worker, if the host has that many for all its workers."""
    if gpus and gpus < each * workers:
        fits = [f"--gpus-per-worker {gpus // workers}"] if gpus >= workers else []
        if gpus >= each:
            fits.append(_other_count(host, workers, total, gpus // each))
        fits.append("--gpus-per-worker 0 for the CPU")
        raise DeviceSplitError(
            f"{workers} workers x {each} GPUs need {workers * each} GPUs on host {host}, "
            f"which has {gpus}: pass {' or '.join(fits)}")
    return each


def visible_devices(local_rank: int, gpus_per_worker: int) -> str:
    """CUDA_VISIBLE_DEVICES by position: GPUs local_rank*K .. +K-1 ("-1" for K = 0)."""
    if gpus_per_worker < 0:
        raise ValueError(f"gpus_per_worker must be >= 0, got {gpus_per_worker}")
    if gpus_per_worker == 0:
        return HIDDEN
    first = local_rank * gpus_per_worker
    return ",".join(str(i) for i in range(first, first + gpus_per_worker))


def assign_devices(ranked: Sequence[_Reported], gpus_per_worker: GpusPerWorker) -> list[str]:
    """Each rank's CUDA_VISIBLE_DEVICES, from the GPUs its engine reported.

    "auto": each set of GPUs (a host's) split evenly among the workers that share it,
    in rank order; none found -> "-1". K: K each, checked against the GPUs found; a
    host where none were found gets GPUs by local rank, unchecked (as before GPUs were
    looked for). 0: "-1" everywhere.
    """
    check_gpus_per_worker(gpus_per_worker)
    if gpus_per_worker == 0:
        return [HIDDEN] * len(ranked)
    devices = [HIDDEN] * len(ranked)
    for (host, _), ranks in _share_groups(ranked).items():
        gpus = ranked[ranks[0]].gpus
        if gpus_per_worker == AUTO:
            each = _auto_share(host, len(gpus), len(ranks), len(ranked))
        else:
            each = _checked_share(host, len(gpus), len(ranks), len(ranked), int(gpus_per_worker))
        for index, rank in enumerate(ranks):
            if not gpus and each:   # K asked for, none found: by position, as before
                devices[rank] = visible_devices(index, each)
            elif each:
                devices[rank] = ",".join(value for value, _ in
                                         gpus[index * each:(index + 1) * each])
    return devices


def describe_devices(cuda_visible_devices: str | None) -> str:
    """'GPU 0,1' or 'CPU', for the start line and the status table."""
    if not cuda_visible_devices or cuda_visible_devices.strip().startswith("-"):
        return "CPU"
    return f"GPU {cuda_visible_devices}"


def resolve_communication(communication: str, devices: Sequence[str | None]) -> str:
    """"auto" becomes "nccl" when every worker has a GPU; anything else stays."""
    if communication == AUTO and devices and all(describe_devices(d) != "CPU"
                                                 for d in devices):
        return "nccl"
    return communication


def devices_line(devices: Sequence[str | None], communication: str) -> str:
    """'devices: GPU 0,1 | GPU 2,3 (NCCL all-reduce)', or 'devices: CPU' when no worker
    has a GPU."""
    described = [describe_devices(d) for d in devices]
    if set(described) == {"CPU"}:
        return "devices: CPU"
    used = resolve_communication(communication, devices)
    return f"devices: {' | '.join(described)} ({used.upper()} all-reduce)"
