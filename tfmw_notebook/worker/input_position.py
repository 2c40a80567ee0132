"""A resumed fit takes the batches the undisturbed fit would have taken (exact resume).

Keras' BackupAndRestore gives back the weights, the optimizer and the epoch and step
counters, not the input's position: the resumed fit started its pipeline again from its
first batch (DESIGN fact 31), so a killed fit ended with other weights than an undisturbed
one. Here the fresh pipeline is replayed up to the backup instead: as many iterators made
as the undisturbed fit had made (a pipeline iterated anew each epoch reshuffles each time)
and as many batches drawn from the last one. A pipeline that is deterministic given its
seeds (arrays, tf.data with seeded shuffles, Keras' own shuffling under
`set_random_seed`) then yields exactly the batches that follow the backup.

Why replay rather than save the iterator's state (`tf.train.Checkpoint(iterator=...)`):
saving costs every backup of every fit (a shuffle buffer is saved whole), Keras' fit makes
its iterator where no callback reaches it, and MultiWorkerMirroredStrategy's distributed
iterators have no checkpointable state of their own. Replaying costs nothing until a
resume, which then reads (does not train on) the batches skipped: see docs/checkpoints.md.

The patch (through guarded_patches.py) is on the data handler of the model's Keras; the
fit wrapper (keras_hooks.py) says where the call asked to start (`watching`). A pipeline
that cannot be replayed (an unseeded shuffle: another order each time) is still advanced,
and `outcome()` says so for the resume line (keras_resume_notice.py).
"""

from __future__ import annotations

import contextlib
import inspect
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from . import guarded_patches, import_hooks


@dataclass
class Replay:
    """What a resumed fit's input was advanced by, for the resume line."""

    iterators: int = 0      # iterators made and dropped (epochs of a re-iterated input)
    batches: int = 0        # batches read and dropped
    seconds: float = 0.0
    problem: str = ""       # why the batches after the resume may not be the undisturbed ones

    def line(self) -> str:
        skipped = f"{self.batches} batches read again in {self.seconds:.1f} s"
        if self.problem:
            return f"; its input could not be put back where it was ({self.problem})"
        return f"; its input goes on where it was ({skipped})"


@dataclass
class _Fit:
    start_epoch: int      # the epoch the fit() call asked to start at
    data: Any             # its `x`, looked at for what cannot be replayed
    replay: Replay | None = None
    taken: bool = False   # the fit's training input was looked at (validation's is not)


_fit: _Fit | None = None


@contextlib.contextmanager
def watching(initial_epoch: int | None, data: Any) -> Iterator[None]:
    """Around an outermost fit() starting at `initial_epoch` (the call's, before any
    backup moves it) on input `data`."""
    global _fit
    _fit = _Fit(int(initial_epoch or 0), data)
    try:
        yield
    finally:
        _fit = None


def outcome() -> Replay | None:
    """How the running fit's input was replayed (None: it was not resumed)."""
    return _fit.replay if _fit is not None else None


def install() -> None:
    """Patch the data handler of tf-keras when (or as soon as) it is imported."""
    import_hooks.when_imported("tf_keras.src.engine.data_adapter", _patch_tf_keras)


def _patch_tf_keras(module) -> None:
    def lookup():
        handler = guarded_patches.attribute(module, "DataHandler")
        method = guarded_patches.method(handler, "enumerate_epochs")
        if getattr(method, "_tfmw_replay", False):   # patched already
            return handler
        for name in ("_initial_epoch", "_adapter", "_dataset", "_inferred_steps"):
            # what the replacement reads, as the original reads it
            if name not in inspect.unwrap(method).__code__.co_names:
                raise guarded_patches.TargetChanged(f"DataHandler.enumerate_epochs reads "
                                                    f"no {name}")
        return handler

    guarded_patches.patch(
        "input_position.replay_tf_keras", "tf_keras DataHandler.enumerate_epochs", lookup,
        _replace_enumerate_epochs, library="tf_keras",
        risk="a fit resumed from its backup starts its input from the first batch")


def _replace_enumerate_epochs(handler) -> None:
    original = handler.enumerate_epochs
    if getattr(original, "_tfmw_replay", False):
        return

    def enumerate_epochs(self):
        plan = _take(self._initial_epoch, self._initial_step)
        if plan is None:
            yield from original(self)
            return
        epochs_done, batches = plan
        recreate = self._adapter.should_recreate_iterator()
        replay = Replay()
        if _fit is not None:
            _fit.replay = replay
        began = time.perf_counter()
        if recreate:   # each earlier epoch made an iterator of its own
            for _ in range(epochs_done):
                iter(self._dataset)
            replay.iterators = epochs_done
        elif epochs_done and self._inferred_steps is None:
            replay.problem = "the number of batches in an epoch is not known"
        else:
            batches += epochs_done * (self._inferred_steps or 0)
        epochs = original(self)
        epoch, iterator = next(epochs)
        _advance(iterator, batches, replay)
        replay.seconds = time.perf_counter() - began
        yield epoch, iterator
        yield from epochs

    enumerate_epochs._tfmw_replay = True   # type: ignore[attr-defined]
    handler.enumerate_epochs = enumerate_epochs


def _take(epoch: int, step: int) -> tuple[int, int] | None:
    """(epochs, batches) the fit had done at its backup: the first input a fit iterates
    is its training input; None when it starts where it asked (no resume)."""
    if _fit is None or _fit.taken:
        return None
    _fit.taken = True
    epochs_done = epoch - _fit.start_epoch
    if epochs_done <= 0 and not step:
        return None
    return max(epochs_done, 0), int(step or 0)


def _advance(iterator, batches: int, replay: Replay) -> None:
    """Read `batches` batches from `iterator` and drop them."""
    if not replay.problem:
        replay.problem = _unrepeatable(_fit.data if _fit is not None else None)
    for done in range(batches):
        try:
            next(iterator)
        except (StopIteration, LookupError) as exc:   # OutOfRangeError is a LookupError
            replay.problem = (f"it ended after {done} of the {batches} batches to skip "
                              f"({type(exc).__name__})")
            break
        replay.batches = done + 1


def _unrepeatable(data: Any) -> str:
    """Why `data` gives other batches when read again ("" when it gives the same)."""
    from .loop_batches import unseeded_shuffle  # loop_batches imports keras_hooks

    if type(data).__module__.startswith("tensorflow.python.data") and unseeded_shuffle(data):
        return ("its pipeline shuffles without a seed, so the batches after the resume are "
                "another draw: give the shuffle a seed (`shuffle(n, seed=1)`)")
    return ""
