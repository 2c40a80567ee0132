"""gpu_check.py's judgements, as pure functions of what the workers reported.

Placement: each worker sees exactly the GPUs it was given, ran its op on a GPU, shares
no GPU with another worker of its host, and (where `nvidia-smi` lists compute
processes) its process runs on its own GPUs only. All-reduce: the sum is exact.
Scaling: samples/s from the warm epochs, and N workers against N times one.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class Placement:
    """What one worker reported after running an op on its GPU."""

    rank: int
    host: str
    visible: str                 # its CUDA_VISIBLE_DEVICES
    tf_gpus: int                 # GPUs TensorFlow lists on it
    op_device: str               # where its op ran ("/job:worker/.../device:GPU:0")
    expected_uuids: tuple[str, ...] = ()   # the GPUs it was given, as the handshake saw them
    # nvidia-smi's view of its process; None where it lists none (e.g. in a container)
    used_uuids: tuple[str, ...] | None = None


def placement_problems(placements: list[Placement]) -> list[str]:
    """One line per problem; empty when every worker runs on its own GPUs."""
    problems = []
    owners: dict[tuple[str, str], int] = {}
    for p in placements:
        given = [v for v in p.visible.split(",") if v.strip()] if p.visible != "-1" else []
        if not given:
            problems.append(f"worker {p.rank} on {p.host} was given no GPU "
                            f"(CUDA_VISIBLE_DEVICES={p.visible})")
            continue
        if p.tf_gpus != len(given):
            problems.append(f"worker {p.rank} on {p.host} sees {p.tf_gpus} GPUs, was given "
                            f"{len(given)} (CUDA_VISIBLE_DEVICES={p.visible}); none seen means no "
                            "driver there or a TensorFlow without CUDA (pip install "
                            "'tensorflow[and-cuda]')")
        if "GPU" not in p.op_device.upper():
            problems.append(f"worker {p.rank} on {p.host} ran its op on {p.op_device}, not a GPU")
        for value in given:
            other = owners.setdefault((p.host, value), p.rank)
            if other != p.rank:
                problems.append(f"workers {other} and {p.rank} on {p.host} share GPU {value}")
        strays = sorted(set(p.used_uuids or ()) - set(p.expected_uuids))
        if p.expected_uuids and strays:
            problems.append(f"worker {p.rank} on {p.host} runs on {', '.join(strays)} per "
                            f"nvidia-smi, not only on its own {', '.join(p.expected_uuids)}")
    return problems


def compute_apps(text: str) -> dict[int, tuple[str, ...]]:
    """`nvidia-smi --query-compute-apps=pid,gpu_uuid --format=csv,noheader` -> {pid: uuids}.
    Lines that are not "pid, uuid" are skipped."""
    used: dict[int, list[str]] = {}
    for line in text.splitlines():
        pid, _, uuid = (part.strip() for part in line.partition(","))
        if pid.isdigit() and uuid.startswith(("GPU-", "MIG-")):
            used.setdefault(int(pid), []).append(uuid)
    return {pid: tuple(sorted(set(uuids))) for pid, uuids in used.items()}


def allreduce_problem(results: list[float], workers: int, length: int) -> str | None:
    """Each worker all-reduced a vector of `length` elements filled with rank + 1: every
    worker must hold the exact sum, 1 + 2 + ... + workers, per element."""
    expected = workers * (workers + 1) / 2 * length
    wrong = [rank for rank, total in enumerate(results) if total != expected]
    if len(results) != workers or wrong:
        return (f"all-reduce gave {results} (expected {expected:g} on each of {workers} "
                f"workers; wrong on {wrong or 'missing workers'})")
    return None


def samples_per_second(epoch_seconds: list[float], steps: int, global_batch: int) -> float:
    """Throughput of the warm epochs: the first (tracing, warm-up) is left out."""
    warm = epoch_seconds[1:] or epoch_seconds
    if not warm or min(warm) <= 0:
        raise ValueError(f"need positive epoch times, got {epoch_seconds}")
    return steps * global_batch / statistics.median(warm)


def scaling_efficiency(one: float, many: float, workers: int) -> float:
    """N workers' samples/s against N times one worker's (1.0: perfect weak scaling)."""
    if one <= 0 or workers < 1:
        raise ValueError(f"need one worker's samples/s > 0 and workers >= 1, got {one}, "
                         f"{workers}")
    return many / (workers * one)


def scaling_table(rows: list[tuple[int, int, float]]) -> str:
    """(workers, global batch, samples/s) per run, the first being one worker: a table
    with each run's efficiency against that first one."""
    lines = [f"{'workers':>7}  {'global batch':>12}  {'samples/s':>12}  {'efficiency':>10}"]
    one = rows[0][2]
    for workers, batch, rate in rows:
        efficiency = "-" if workers == 1 else f"{scaling_efficiency(one, rate, workers):.0%}"
        lines.append(f"{workers:>7}  {batch:>12}  {rate:>12,.0f}  {efficiency:>10}")
    return "\n".join(lines)
