"""End a process we launched when the kernel that launched it is gone.

The controller and engines of a cluster we start are the kernel's children.
A kernel that exits cleanly stops them (ipyparallel's exit handler), but one
that is killed (SIGKILL, OOM, a forced restart) would leave them running, with
TensorFlow's memory and ports held. Here a thread notices the re-parenting
and asks the process to stop (SIGTERM, which both shut down cleanly on), then
insists.

The parent is the one the process had when it began (`PARENT`, read at this module's
import), not the one it has when the guard starts: an engine's startup command runs only
once it has registered, and a kernel killed before that would go unnoticed, its engines
waiting for the controller for as long as the start allows. Both processes import this
module first thing.
"""

from __future__ import annotations

import os
import signal
import threading
import time

PARENT = os.getppid()
_GRACE = 5.0
_started = False


def start(poll: float = 1.0) -> None:
    """Watch for the re-parenting from a thread (once per process)."""
    global _started
    if _started:
        return
    _started = True

    def watch() -> None:
        while os.getppid() == PARENT:
            time.sleep(poll)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(_GRACE)
        os._exit(1)

    threading.Thread(target=watch, name="tfmw-orphan-guard", daemon=True).start()
