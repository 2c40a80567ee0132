"""A memory limit on one running process, for tests that need the kernel's out-of-memory
killer to end it: a child memory cgroup (cgroup v1's memory controller, as on this
machine and CI's) made under the process' own, the process moved in, everything
removed afterwards. Skips the test where no such cgroup can be made (no controller, no
permission, cgroup v2's rule against processes in inner groups)."""

from __future__ import annotations

import contextlib
import os
import time
import uuid

import pytest

_V1_ROOT = "/sys/fs/cgroup/memory"


def _memory_cgroup_of(pid: int) -> str | None:
    with open(f"/proc/{pid}/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            if "memory" in controllers.split(","):
                return os.path.join(_V1_ROOT, path.lstrip("/"))
    return None


@contextlib.contextmanager
def memory_limited_or_skip(pid: int, limit: int):
    """Run the block with `pid`'s new allocations limited to `limit` bytes."""
    parent = _memory_cgroup_of(pid)
    if parent is None or not os.path.isdir(parent):
        pytest.skip("no cgroup v1 memory controller for this process")
    child = os.path.join(parent, f"tfmw-test-{uuid.uuid4().hex[:8]}")
    try:
        os.mkdir(child)
        with open(os.path.join(child, "memory.limit_in_bytes"), "w") as f:
            f.write(str(limit))
        with open(os.path.join(child, "cgroup.procs"), "w") as f:
            f.write(str(pid))
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.rmdir(child)
        pytest.skip(f"cannot limit a process' memory here: {exc}")
    try:
        yield child
    finally:
        _remove(child, parent)


def _remove(child: str, parent: str) -> None:
    """Move what is left in `child` back to `parent`, then remove it (a group empties a
    moment after its last process is killed)."""
    deadline = time.monotonic() + 10
    while True:
        with open(os.path.join(child, "cgroup.procs")) as f:
            left = f.read().split()
        for pid in left:
            with contextlib.suppress(OSError), open(os.path.join(parent, "cgroup.procs"), "w") as f:
                f.write(pid)
        try:
            os.rmdir(child)
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
