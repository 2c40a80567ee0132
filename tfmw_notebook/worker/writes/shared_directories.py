"""A directory another worker made while this cell ran is not an error here.

A %%tfdist cell runs on every worker at once, and workers on one host (or on a shared file
system) share the directories the code names. Code written for one process checks, then
creates: `if not os.path.exists(d): os.makedirs(d)` (keras.io's fault-tolerance guide).
Two workers can both see "missing", and the slower one's `mkdir` raises FileExistsError
although in one process it could not (seen in this project's tests: worker 0 failed the
guide's cell). Here, while a cell runs, `os.mkdir` (which `os.makedirs` and
`pathlib.Path.mkdir` call) treats that case as done: the path is a directory made since
the cell began on this worker, so another worker made it. A directory older than the cell,
or a file at the path, still raises, as in one process.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from collections.abc import Iterator

_original_mkdir = os.mkdir
_began: float | None = None     # time.time() when the running cell began; None: no cell
_MARK = "_tfmw_shared_directories"
# File times come from the kernel's coarse clock, a few milliseconds behind time.time().
_CLOCK_SLACK = 0.1


def install() -> None:
    """Put the tolerant `mkdir` in place (once; the same on every worker)."""
    if getattr(os.mkdir, _MARK, False):
        return
    setattr(_mkdir, _MARK, True)
    os.mkdir = _mkdir


@contextlib.contextmanager
def during_cell() -> Iterator[None]:
    """The span of one cell: directories made from now on by others count as shared."""
    global _began
    _began = time.time()
    try:
        yield
    finally:
        _began = None


def _mkdir(path, mode=0o777, *, dir_fd=None):
    try:
        _original_mkdir(path, mode, dir_fd=dir_fd)
    except FileExistsError:
        if not _made_by_another_worker(path, dir_fd):
            raise


def _made_by_another_worker(path, dir_fd) -> bool:
    began = _began
    if began is None or dir_fd is not None:
        return False
    try:
        status = os.stat(path)
    except OSError:
        return False
    # A new directory's change time is its making (or a later change, also in the cell).
    return stat.S_ISDIR(status.st_mode) and status.st_ctime >= began - _CLOCK_SLACK
