"""Why a worker process ended: its signal or exit code, and whether the kernel's
out-of-memory killer ended it (cgroup counters, else the kernel log).

Every source may be unreadable (another host, no permission, no cgroup memory
controller): then that part of the cause is left out, never guessed.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from dataclasses import dataclass

from ..launch.memory_cgroups import V2, memory_cgroup_dirs

_KERNEL_LOG_SECONDS = 2.0


def exit_cause(code) -> str:
    """"killed by SIGKILL" for a negative return code, "exit code 3" otherwise."""
    if code is None or isinstance(code, str):   # ipyparallel says "unknown" at times
        return ""
    code = int(code)
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def oom_kill_count(text: str) -> int | None:
    """The `oom_kill N` line of cgroup v2's memory.events or v1's memory.oom_control."""
    match = re.search(r"^oom_kill\s+(\d+)\s*$", text, re.MULTILINE)
    return int(match.group(1)) if match else None


def oom_killed_in_log(log: str, pid: int) -> bool:
    """Whether the kernel log says the OOM killer ended `pid`."""
    pattern = re.compile(rf"(Killed process {pid}\b|oom-kill:.*\bpid={pid}\b)")
    return any(pattern.search(line) for line in log.splitlines())


def _cgroup_files(proc_cgroup: str) -> list[str]:
    """Where this process' OOM counter may be: its cgroup's, then the namespace root's."""
    files = []
    for version, directory, root in memory_cgroup_dirs(proc_cgroup):
        name = "memory.events" if version == V2 else "memory.oom_control"
        files += [os.path.join(directory, name), os.path.join(root, name)]
    return files


def _read(path: str) -> str | None:
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return None


_counter_file: list[str] = []   # where read_oom_count last found the counter


def read_oom_count() -> int | None:
    """OOM kills counted in this process' memory cgroup (and those under it), if readable.

    Read at every cell (the count before it): the file found is read again first, without
    /proc/self/cgroup and the files tried before it (13 us a cell instead of 31, measured).
    """
    for path in _counter_file:
        count = oom_kill_count(_read(path) or "")
        if count is not None:
            return count
    _counter_file.clear()
    for path in _cgroup_files(_read("/proc/self/cgroup") or ""):
        count = oom_kill_count(_read(path) or "")
        if count is not None:
            _counter_file.append(path)
            return count
    return None


def read_kernel_log() -> str:
    """The kernel's ring buffer, if this process may read it ("" otherwise)."""
    try:
        done = subprocess.run(["dmesg"], capture_output=True, text=True,
                              timeout=_KERNEL_LOG_SECONDS)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout if done.returncode == 0 else ""


def oom_held_in_log(log: str, pid: int) -> int | None:
    """The bytes `pid` held when the OOM killer ended it (its anon, file and shmem RSS, from
    the kernel's "Killed process" line), or None when no such line gives them."""
    for line in log.splitlines():
        if re.search(rf"Killed process {pid}\b", line):
            sizes = re.findall(r"\b(?:anon|file|shmem)-rss:(\d+)kB", line)
            if sizes:
                return sum(int(kb) for kb in sizes) * 1024
    return None


@dataclass(frozen=True)
class OomKill:
    """The kernel's OOM killer ended a worker; `held`: the bytes it held then, if logged."""
    held: int | None = None


class OomWatch:
    """Counts the OOM kills from when it is made: did one end a given worker?"""

    def __init__(self):
        self.before = read_oom_count()

    def kill_of(self, pid: int) -> OomKill | None:
        """The OOM kill that ended `pid`, or None when no source says one did."""
        log = read_kernel_log()
        if oom_killed_in_log(log, pid):
            return OomKill(held=oom_held_in_log(log, pid))
        after = read_oom_count()
        if self.before is not None and after is not None and after > self.before:
            return OomKill()
        return None


def size_words(nbytes: int) -> str:
    """1.3 GiB, 870 MiB."""
    if nbytes >= 1 << 30:
        return f"{nbytes / (1 << 30):.1f} GiB"
    return f"{nbytes / (1 << 20):.0f} MiB"


def death_words(code, oom: OomKill | None) -> str:
    """What happened to a worker that ended: "died (exit code 3)", "died (killed by
    SIGKILL)", "died" when nothing is known, or, when the OOM killer ended it (a SIGKILL,
    or an end whose code is unknown), "was killed by the kernel's out-of-memory killer
    holding 1.3 GiB (SIGKILL)"."""
    how = exit_cause(code)
    if oom is not None and (code is None or how == "killed by SIGKILL"):
        held = f" holding {size_words(oom.held)}" if oom.held is not None else ""
        return ("was killed by the kernel's out-of-memory killer" + held
                + (" (SIGKILL)" if how else ""))
    return f"died ({how})" if how else "died"
