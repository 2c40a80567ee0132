"""Where this process' memory cgroup lives: read from /proc/self/cgroup, for the OOM
counter (death_cause.py) and the memory room of a start (host_capacity.py)."""

from __future__ import annotations

import os

V1, V2 = 1, 2
_V1_ROOT, _V2_ROOT = "/sys/fs/cgroup/memory", "/sys/fs/cgroup"


def memory_cgroup_dirs(proc_cgroup: str) -> list[tuple[int, str, str]]:
    """(version, the group's directory, the hierarchy's root) for each memory cgroup
    /proc/<pid>/cgroup names: cgroup v2's unified line, v1's memory controller."""
    found = []
    for line in proc_cgroup.splitlines():
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        path = path.strip().lstrip("/")
        if controllers == "":
            found.append((V2, os.path.join(_V2_ROOT, path), _V2_ROOT))
        elif "memory" in controllers.split(","):
            found.append((V1, os.path.join(_V1_ROOT, path), _V1_ROOT))
    return found
