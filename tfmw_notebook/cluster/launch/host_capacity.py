"""Whether `n` local workers fit this host, decided before any of them starts.

Two bounds, each from something measured: memory (every worker holds its own copy of
TensorFlow's state, while the libraries' pages are shared) and cores (past 8 workers a
core, each waits for the others most of the time and heartbeats starve). Either one
refuses the start in one line naming the estimate. Idle workers are the floor: a start
that passes may still run out of memory once models and data load; one refused could
not have started.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from .memory_cgroups import V1, V2, memory_cgroup_dirs

# An idle worker's own memory (USS: TensorFlow, tf-keras and Keras 3 imported, its strategy
# made), and what all workers share once (the libraries' pages: RSS minus USS). Measured
# 2026-11-26 on this project's 2-core machine with psutil: USS 290 MiB (--keras 2) and
# 346 MiB (--keras 3); RSS 688 and 761 MiB.
WORKER_OWN_BYTES = 350 << 20
SHARED_BYTES = 420 << 20
WORKERS_PER_CORE = 8
_ELSEWHERE = "or attach to a cluster on several machines (`TFCluster.attach()`)"

@dataclass(frozen=True)
class HostCapacity:
    available_bytes: int | None   # memory free for new processes; None: unknown
    cores: int                    # the cores this process may run on


def needed_bytes(n: int) -> int:
    return SHARED_BYTES + n * WORKER_OWN_BYTES


def problem(n: int, capacity: HostCapacity, spares: int = 0) -> str | None:
    """Why `n` workers and `spares` spare engines (each counted as a worker: standby.py)
    cannot start on a host of `capacity`, in one line; None if they can."""
    what = f"{n} workers" + (f" and {spares} spare engines" if spares else "")
    most = capacity.cores * WORKERS_PER_CORE
    if n + spares > most:
        return (f"{what} would share this host's {capacity.cores} cores: more than "
                f"{WORKERS_PER_CORE} a core, each would wait for the others most of the time. "
                f"Start at most {max(0, most - spares)} here, {_ELSEWHERE}")
    available = capacity.available_bytes
    if available is not None and needed_bytes(n + spares) > available:
        fits = max(0, (available - SHARED_BYTES) // WORKER_OWN_BYTES - spares)
        return (f"{what} need at least {_gib(needed_bytes(n + spares))} of memory (an idle "
                f"worker holds {WORKER_OWN_BYTES >> 20} MiB of its own, plus "
                f"{SHARED_BYTES >> 20} MiB they share), but this host has {_gib(available)} "
                f"available. Start at most {fits} here, free memory, {_ELSEWHERE}")
    return None


def read_capacity() -> HostCapacity:
    """This host's available memory (the smaller of the system's and this process'
    cgroup's room) and the cores this process may use."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return HostCapacity(available_bytes=_available_bytes(), cores=max(1, cores))


def _available_bytes() -> int | None:
    rooms = [room for room in (_meminfo_available(),
                               *map(_cgroup_room, _cgroup_files(_read("/proc/self/cgroup") or "")))
             if room is not None]
    return min(rooms) if rooms else None


def _cgroup_files(proc_cgroup: str) -> list[tuple[str, str]]:
    """(limit, usage) files of this process' memory cgroup, cgroup v2's or v1's."""
    names = {V2: ("memory.max", "memory.current"),
             V1: ("memory.limit_in_bytes", "memory.usage_in_bytes")}
    return [(os.path.join(directory, names[version][0]), os.path.join(directory, names[version][1]))
            for version, directory, _ in memory_cgroup_dirs(proc_cgroup)]


def _meminfo_available() -> int | None:
    text = _read("/proc/meminfo") or ""
    for line in text.splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return None


def _cgroup_room(files: tuple[str, str]) -> int | None:
    """The cgroup's limit minus its usage; None without a limit (v2 says "max"; v1 a huge
    number) or where the files are unreadable."""
    limit, usage = (_read(path) for path in files)
    try:
        limit_bytes, usage_bytes = int(limit or ""), int(usage or "")
    except ValueError:
        return None
    if limit_bytes >= 1 << 60:
        return None
    return max(0, limit_bytes - usage_bytes)


def _read(path: str) -> str | None:
    try:
        with open(path) as handle:
            return handle.read().strip()
    except OSError:
        return None


def _gib(nbytes: int) -> str:
    return f"{nbytes / (1 << 30):.1f} GiB"
