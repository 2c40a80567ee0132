"""The Keras callback that turns a SIGTERM mid-fit into a backup at a step every worker agrees on.

A worker sent SIGTERM (preemption.py) cannot save alone: its peers are in the same step's
all-reduce, and a backup of one worker at step n and another at n+1 cannot be resumed.
So every few batches (their number agreed at each check: BUDGET below) all workers sum one
flag per worker (one small all-reduce, traced once); when any flag is set, each backs up
through the fit's own BackupAndRestore at that same batch (the chief waits for its
writer thread to commit it), they meet once more (every backup is on disk), and the fit
raises AbortedError, which the notebook counts as retryable: `--max-restarts` restarts
the workers and the fit resumes from that backup, its input at that batch
(input_position.py).
Cost: benchmarks/preemption_check.py.

The callback's logic; keras_callbacks.py puts it on the Callback class of the model's Keras.
"""

from __future__ import annotations

import functools
import math
import time
from typing import Any

from ..common import guarded_patches, shared_strategy
from ..writes import background_writes
from . import preemption
from .callback_logic import CallbackLogic

# The agreement's share of the fit's time it aims at: each check also proposes the number
# of batches to the next one from its own cost and the steps' time (the proposals are
# averaged, so every worker checks at the same batch), never more than a quarter of the
# grace period of steps. Measured: benchmarks/preemption_check.py.
BUDGET = 0.01
FIRST_CHECK = 8    # batches: after Keras' check of slow batch hooks (its first 5 batches)


class PreemptionSave(CallbackLogic):
    """Backs the fit up at the first agreed batch after a SIGTERM to any worker, then
    ends it with a retryable error. Comes after the fit's BackupAndRestore (`backup`)."""

    def __init__(self, backup: Any, *, grace: float, rank: int, world_size: int):
        super().__init__()
        self.backup, self.grace, self.rank, self.world_size = backup, grace, rank, world_size
        self._supports_tf_logs = True   # tf-keras: its batch logs stay tensors (no sync)
        self._batches = 0
        self._next = FIRST_CHECK
        self._since: tuple[int, float] = (0, 0.0)   # (batches, clock) at the last check
        self._cost = 0.002                            # seconds of the last check

    def on_train_begin(self, logs=None):
        preemption.arm(self.grace)
        _all_reduce(self.world_size)       # traced here, not inside a timed batch hook
        self._since = (0, time.perf_counter())

    # No disarm at the fit's end: a SIGTERM after its last check is kept to the cell's
    # end (preemption.py), the fit's work done.

    def on_train_batch_end(self, batch, logs=None):
        self._batches += 1
        if self._batches < self._next:
            return
        began = time.perf_counter()
        step_seconds = (began - self._since[1]) / max(1, self._batches - self._since[0])
        summed = self._sum(preemption.requested(), self._proposal(step_seconds))
        asked = [rank for rank, flag in enumerate(summed[:-1]) if flag]
        if asked:
            self._stop(batch, asked)
        # The proposals' mean: the same on every worker, so they meet at the same batch.
        self._next = self._batches + max(1, math.ceil(summed[-1] / self.world_size))
        self._cost = time.perf_counter() - began
        self._since = (self._batches, time.perf_counter())

    def _proposal(self, step_seconds: float) -> int:
        """Batches to the next check: the last one's cost within BUDGET of the steps'
        time, and at most a quarter of the grace period away."""
        step = max(step_seconds, 1e-6)
        wanted = math.ceil(self._cost / (BUDGET * step))
        return max(1, min(wanted, int(self.grace / 4 / step)))

    def _stop(self, batch: int, asked: list[int]) -> None:
        import tensorflow as tf

        saved = _save_now(self.backup, batch) and _written()
        self._sum(False, 0)          # every worker's backup is written before any raises
        preemption.answered()
        step = int(self.model.optimizer.iterations.numpy())
        names = ", ".join(map(str, asked))
        where = (f"every worker backed up at step {step}" if saved else
                 "the backup could not be written now: the last periodic one is kept")
        raise tf.errors.AbortedError(
            None, None, f"worker {names} was asked to stop (SIGTERM, a preemption): "
            f"{where}; with --max-restarts the cell resumes from there")

    def _sum(self, mine: bool, proposal: int) -> list[float]:
        """Each worker's flag and the proposals' total, summed over the workers (every
        worker calls this at the same batch)."""
        import tensorflow as tf

        values = [0.0] * (self.world_size + 1)
        values[self.rank], values[-1] = (1.0 if mine else 0.0), float(proposal)
        summed = _all_reduce(self.world_size)(tf.constant(values, tf.float32))
        return [float(v) for v in summed.numpy()]


@functools.cache
def _all_reduce(size: int):
    """A sum over the workers of a float32 vector of `size` + 1 (one replica each),
    traced once per process."""
    import tensorflow as tf

    strategy = shared_strategy.shared_strategy()

    @tf.function(input_signature=[tf.TensorSpec([size + 1], tf.float32)])
    def agree(values):
        def replica_sum():   # made in the replica (a captured input has no destination)
            return tf.distribute.get_replica_context().all_reduce(
                tf.distribute.ReduceOp.SUM, tf.identity(values))
        return strategy.experimental_local_results(strategy.run(replica_sum))[0]

    agree.get_concrete_function()
    return agree


def _written() -> bool:
    """Whether the backups handed to the chief's writer thread are written and committed
    (waited for here: the worker ends soon after)."""
    try:
        background_writes.wait()
    except Exception:
        return False
    return True


def _save_now(backup: Any, batch: int) -> bool:
    """The fit's BackupAndRestore writes its backup now (tf-keras `_backup`, Keras 3
    `_save_model`: private, so looked up through guarded_patches)."""
    tf_keras = hasattr(type(backup), "_backup")
    name, reads = ("_backup", ("epoch", "batch")) if tf_keras else ("_save_model", ())

    def save(method):
        if tf_keras:
            method(epoch=backup._current_epoch, batch=batch)
        else:
            method()

    return guarded_patches.patch(
        "keras_preemption.save_now", f"{type(backup).__module__}.BackupAndRestore.{name}",
        lambda: guarded_patches.method(backup, name, *reads), save,
        library=type(backup).__module__.split(".")[0],
        risk="a preempted fit resumes from its last periodic backup")
