"""Where a worker's main thread is: in the framework (TensorFlow, Keras, this package)
or in the user's own code. Sampled by the heartbeat thread.

A worker stuck in its own code (a deadlock, a sleep, an endless loop) while the
others wait in a collective looks, from outside, like every worker waiting. The
innermost frame that is not the standard library tells them apart: a training
step, a trace or a collective is inside TensorFlow; a stuck callback is not.
"""

from __future__ import annotations

import gc
import os
import sys
import sysconfig
import threading
from types import FrameType

from ...protocol.events import FRAMEWORK

_FRAMEWORK_PARTS = tuple(f"{os.sep}{name}{os.sep}" for name in (
    "tensorflow", "tf_keras", "keras", "tfmw_notebook", "ipyparallel", "ipykernel",
    "IPython", "zmq", "tornado", "traitlets"))
_STDLIB = sysconfig.get_paths()["stdlib"] + os.sep


def main_thread_whereabouts() -> str:
    """FRAMEWORK, or 'file:line in function' of the user's code the main thread is in."""
    main = threading.main_thread().ident    # None only for a thread not yet started
    frame = current_frames().get(main) if main is not None else None
    while frame is not None:
        filename = frame.f_code.co_filename
        if _in_stdlib(filename):
            frame = frame.f_back   # time.sleep's caller, a lock's waiter, ...
            continue
        if any(part in filename for part in _FRAMEWORK_PARTS):
            return FRAMEWORK
        return f"{filename}:{frame.f_lineno} in {frame.f_code.co_name}"
    return FRAMEWORK


def current_frames() -> dict[int, FrameType]:
    """sys._current_frames(), with no garbage collection inside it before Python 3.12.

    Up to 3.11 it holds the interpreter's thread-list lock while it makes frame objects,
    and a collection those allocations start can free a `threading.local` (TensorFlow's
    graphs hold one), whose freeing takes that lock again: the heartbeat thread then waits
    on itself forever, holding the GIL, and the whole worker stops while its peers wait in
    an all-reduce (CPython gh-106883; seen as a fit that never ended, py-spy showing the
    heartbeat in gc_collect_main under sys._current_frames). 3.12 collects only between
    bytecodes. The collection is put off, not skipped: the next allocation after it runs.
    """
    if sys.version_info >= (3, 12):
        return sys._current_frames()
    enabled = gc.isenabled()   # left off if the user turned it off
    gc.disable()
    try:
        return sys._current_frames()
    finally:
        if enabled:
            gc.enable()


def _in_stdlib(filename: str) -> bool:
    # Modules frozen into the interpreter (os, _collections_abc, ...) name no file: a
    # trace iterating a dict's items() was once named as the user's own code.
    return filename.startswith("<frozen ") or (
        filename.startswith(_STDLIB) and "site-packages" not in filename)
