"""TensorBoard callbacks in a %%tfdist cell: only the chief's logs are kept.

Every worker must run the callback (its summaries are written at the same points
of the same steps), but logs from all of them would show up as several runs of one
job. As Keras' multi-worker guidance does, the workers other than the chief write to
a temporary directory removed after the fit. Done here for the user, with no change
to the cell: tf-keras itself would put them in `<log_dir>/workertemp_<rank>`, inside
the chief's directory, where a TensorBoard watching it shows them while training
runs, and where they stay when a worker is killed. Ours sit in the worker's own
temp directory (tempdirs.py), which goes with the worker.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from typing import Any

# Directories the chief's TensorBoard callbacks wrote to, oldest first (for
# `%tfdist tensorboard` with no directory).
_chief_log_dirs: list[str] = []


def log_dirs() -> list[str]:
    """Where this worker's TensorBoard callbacks wrote (absolute paths, no repeats)."""
    return list(_chief_log_dirs)


def tensorboard_classes() -> tuple[type, ...]:
    """Keras' TensorBoard callback classes in this process: `tf.keras`'s, and Keras 3's when a
    cell imported `keras` on tf-keras workers (its callback writes logs on every worker too)."""
    import tensorflow as tf

    classes: list[type] = [tf.keras.callbacks.TensorBoard]
    keras = sys.modules.get("keras")
    board = getattr(getattr(keras, "callbacks", None), "TensorBoard", None)
    if isinstance(board, type) and board not in classes:
        classes.append(board)
    return tuple(classes)


@contextlib.contextmanager
def chief_only_logs(callbacks: list, *, is_chief: bool):
    """While a fit runs: the TensorBoard callbacks among `callbacks` write to their own
    directories on the chief, and to a temporary directory elsewhere."""
    boards: list[Any] = [c for c in callbacks if isinstance(c, tensorboard_classes())]
    if is_chief or not boards:
        for board in boards:
            path = os.path.abspath(str(board.log_dir))
            if path not in _chief_log_dirs:
                _chief_log_dirs.append(path)
        yield
        return
    chosen = [board.log_dir for board in boards]
    temp = tempfile.mkdtemp(prefix="tfmw-tensorboard-")
    for index, board in enumerate(boards):
        board.log_dir = os.path.join(temp, str(index))
    try:
        yield
    finally:
        for board, log_dir in zip(boards, chosen, strict=True):
            board.log_dir = log_dir      # the user's object looks as it did
        shutil.rmtree(temp, ignore_errors=True)
