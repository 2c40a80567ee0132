"""TensorFlow's C++ start-up logging, kept out of what the user reads. Standard library only.

Importing TensorFlow 2.21 and setting up its devices writes straight to file descriptor 2,
before TensorFlow reads TF_CPP_MIN_LOG_LEVEL (*measured*: the variable set to 2 hides
none of it): absl's banner "WARNING: All log messages before absl::InitializeLog() ...",
INFO lines (oneDNN, "Could not find cuda drivers") and, on a machine without NVIDIA
GPUs, "E... failed call to cuInit: ... CUDA error", which reads as a failure. While
`quiet_startup()` is active, descriptor 2 goes through a filter that drops the lines
TF_CPP_MIN_LOG_LEVEL asks to hide, the banner, and the cuInit line where there is no
GPU to initialize; everything else (real errors) passes on as written. The filter is a
process, not a thread, so what a crashing process wrote still reaches its log.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
from collections.abc import Iterator

BANNER = "WARNING: All log messages before absl::InitializeLog() is called"
CUINIT = "failed call to cuInit"

# The filter's program (run as `python -S -c`); argv: the lowest severity kept (0-3, glog's
# I W E F), 1 when the cuInit line is to be dropped, the banner, the cuInit line's words.
# Lines are passed on one by one, unbuffered.
_FILTER = r"""
import re, sys
keep_from, drop_cuinit = int(sys.argv[1]), sys.argv[2] == "1"
banner, cuinit = sys.argv[3].encode(), sys.argv[4].encode()
log_line = re.compile(rb"^([IWEF])\d{4} \d\d:\d\d:\d+\.\d+ +\d+ [^ ]+:\d+\] ")
source, sink = sys.stdin.buffer, sys.stdout.buffer
for line in iter(source.readline, b""):
    found = log_line.match(line)
    if line.startswith(banner) or (found and (
            b"IWEF".index(found.group(1)) < keep_from or (drop_cuinit and cuinit in line))):
        continue
    sink.write(line)
    sink.flush()
"""


def min_log_level() -> int:
    """TF_CPP_MIN_LOG_LEVEL as TensorFlow reads it (0: everything, 3: fatal only)."""
    try:
        return min(3, max(0, int(os.environ.get("TF_CPP_MIN_LOG_LEVEL", "0"))))
    except ValueError:
        return 0


def has_nvidia_gpu() -> bool:
    """Whether this machine has an NVIDIA driver with a device (its device nodes)."""
    return os.path.exists("/dev/nvidiactl") or os.path.exists("/dev/nvidia0")


class _Filter:
    """Descriptor 2 through the filter process, until `stop()`."""

    def __init__(self) -> None:
        read, write = os.pipe()
        self._pipe = _identity(write)
        self._saved = os.dup(2)
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-S", "-c", _FILTER, str(min_log_level()),
                 "0" if has_nvidia_gpu() else "1", BANNER, CUINIT],
                stdin=read, stdout=self._saved, stderr=self._saved)
        except BaseException:
            os.close(self._saved)
            os.close(write)
            raise
        finally:
            os.close(read)
        sys.stderr.flush()
        os.dup2(write, 2)
        os.close(write)

    def stop(self) -> None:
        """Every descriptor that leads into the filter leads where descriptor 2 did.

        Not only descriptor 2: an engine's ipykernel, set up meanwhile, copied it (to echo
        what it captures) and put its own capture pipe there, which must stay.
        """
        sys.stderr.flush()
        for fd in _descriptors():
            if fd != self._saved and _identity(fd) == self._pipe:
                os.dup2(self._saved, fd)
        os.close(self._saved)
        # The filter passes on what is left, then ends; a child started meanwhile may still
        # hold the pipe (and the filter pass its output on): no longer wait than this.
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._process.wait(timeout=2)
        if self._process.poll() is None:   # reaped whenever it ends
            threading.Thread(target=self._process.wait, daemon=True).start()


def _identity(fd: int) -> tuple[int, int] | None:
    try:
        stat = os.fstat(fd)
    except OSError:
        return None
    return stat.st_dev, stat.st_ino


def _descriptors() -> list[int]:
    """This process's open file descriptors."""
    for directory in ("/proc/self/fd", "/dev/fd"):
        try:
            return sorted(int(name) for name in os.listdir(directory))
        except (OSError, ValueError):
            continue
    return [2]


_active: list[_Filter] = []


def begin() -> None:
    """Filter descriptor 2 from now on (once: a second call while it is on does nothing)."""
    if _active:
        return
    try:
        _active.append(_Filter())
    except OSError:   # no filter rather than no TensorFlow
        pass


def end() -> None:
    """Descriptor 2 (and its copies) as it was before `begin()`, once the filter has passed
    on what was written to it."""
    while _active:
        _active.pop().stop()


@contextlib.contextmanager
def quiet_startup() -> Iterator[None]:
    """Filter descriptor 2 while TensorFlow is imported and sets up its devices
    (also ending a filter an earlier `begin()` started)."""
    begin()
    try:
        yield
    finally:
        end()
