"""End a process we launched when the kernel that launched it is gone.

The controller and engines of a cluster we start are the kernel's children.
A kernel that exits cleanly stops them (ipyparallel's exit handler), but one
that is killed (SIGKILL, OOM, a forced restart) would leave them running, with
TensorFlow's memory and ports held. Here a thread notices the re-parenting
and asks the process to stop (SIGTERM, which both shut down cleanly on), then
insists.

The parent to watch is the kernel that launched the process, named in its environment
(`LAUNCHER_VARIABLE`, set by the launching kernel), not whichever parent the process finds
once it gets here: a kernel killed in the second or so before (while the process imports
its package, longer on a loaded machine) would have left it re-parented already, and a
guard that took the new parent as its own would wait forever. Without the variable (a
process someone else launched) the parent at this module's import is taken. An engine's
startup command runs only once it has registered, so engines start the guard earlier
(worker/boot/engine_main.py); so does the controller.
"""

from __future__ import annotations

import os
import signal
import threading
import time

LAUNCHER_VARIABLE = "TFMW_LAUNCHED_BY"
# Read once and removed, so that processes this one starts do not take it for theirs.
PARENT = int(os.environ.pop(LAUNCHER_VARIABLE, "0") or 0) or os.getppid()
_GRACE = 5.0
_started = False


def launched_by_this_process() -> dict[str, str]:
    """The environment entry that names this process as the launcher to watch."""
    return {LAUNCHER_VARIABLE: str(os.getpid())}


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
