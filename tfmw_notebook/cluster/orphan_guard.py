"""End a process we launched when the kernel that launched it is gone.

The controller and engines of a cluster we start are the kernel's children.
A kernel that exits cleanly stops them (ipyparallel's exit handler), but one
that is killed (SIGKILL, OOM, a forced restart) would leave them running, with
TensorFlow's memory and ports held. Here a thread notices the re-parenting
and asks the process to stop (SIGTERM, which both shut down cleanly on), then
insists.
"""

from __future__ import annotations

import os
import signal
import threading
import time

_GRACE = 5.0


def start(poll: float = 1.0) -> None:
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(_GRACE)
        os._exit(1)

    threading.Thread(target=watch, name="tfmw-orphan-guard", daemon=True).start()
