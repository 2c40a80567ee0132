"""Where each worker keeps its temporary files, so that nothing outlives it.

TensorFlow writes files into the temp directory that it never removes (autograph's
`__autograph_generated_file*.py`, one per converted function), and a worker that is
killed cannot clean up after itself. Each worker therefore uses a directory of its
own, named by its pid, that the worker removes when it ends and the notebook removes
when it kills a worker on its own host. Both sides import this module.
"""

from __future__ import annotations

import os
import shutil
import tempfile


def worker_tempdir(pid: int) -> str:
    return os.path.join(tempfile.gettempdir(), f"tfmw-worker-{pid}")


def remove_worker_tempdir(pid: int, path: str | None = None) -> None:
    """Remove worker `pid`'s directory (`path` when the worker itself already moved
    its tempfile default there)."""
    shutil.rmtree(path or worker_tempdir(pid), ignore_errors=True)


def sweep_stale() -> int:
    """Remove the directories of workers on this host whose process is gone (killed
    where no notebook could clean up: on another host, or with the kernel)."""
    removed = 0
    for name in os.listdir(tempfile.gettempdir()):
        if not name.startswith("tfmw-worker-") or not name[12:].isdigit():
            continue
        try:
            os.kill(int(name[12:]), 0)
        except ProcessLookupError:
            remove_worker_tempdir(int(name[12:]))
            removed += 1
        except PermissionError:
            pass   # someone else's live process
    return removed


def use_private_tempdir() -> str:
    """On a worker: send this process's temporary files to its own directory (and
    sweep those of dead workers first)."""
    sweep_stale()
    pid = os.getpid()
    path = worker_tempdir(pid)
    os.makedirs(path, exist_ok=True)
    tempfile.tempdir = path
    os.environ["TMPDIR"] = path   # for child processes and libraries that read it
    return path
