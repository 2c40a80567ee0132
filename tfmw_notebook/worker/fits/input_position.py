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

The patches (through guarded_patches.py) are on the data handler of each Keras. Where the
fit resumes is read from the restored optimizer's step, the one count every backup holds
exactly, split by the epoch's length into (epochs done, batches into the next). Keras'
own counters are not enough: tf-keras' BackupAndRestore, when it backs up each epoch, puts
a backup taken mid-epoch (a preemption's) at the next epoch, and one taken at the fit's
last step after the fit's end (then nothing is left to replay: the fit trains no more);
Keras 3's starts the backup's epoch again from its first batch. So tf-keras' data handler
is put at that epoch and step here, and Keras 3's fit at that epoch (`resume_at`, from
keras_resume_point.py) with its first epoch's loop started at that batch. Only a fit
whose epoch length is not known (an input of unknown size without `steps_per_epoch`)
keeps tf-keras' counters. The fit wrapper (keras_hooks.py) says where the call asked to
start (`watching`). A pipeline that cannot be replayed (an unseeded shuffle: another
order each time) is still advanced, and `outcome()` says so for the resume line
(keras_resume_notice.py).

A fit continued from an automatic checkpoint (`--resume-from`, checkpoint_resume.py) is
put back the same way: `resuming` tells the next fit where the checkpoint's run began
(its first epoch and its optimizer's step then, which the checkpoint records), so the
restored optimizer's step says how far that run went. A checkpoint that does not record
it (written before it did) is taken as its whole epochs from the first.
"""

from __future__ import annotations

import contextlib
import inspect
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..common import guarded_patches, import_hooks
from ..corrections.loop_batches import unseeded_shuffle
from ..writes import checkpointing
from . import input_orders
from .optimizer_steps import optimizer_steps


@dataclass
class Replay:
    """What a resumed fit's input was advanced by, for the resume line."""

    iterators: int = 0      # iterators made and dropped (epochs of a re-iterated input)
    batches: int = 0        # batches read and dropped
    seconds: float = 0.0
    problem: str = ""       # why the batches after the resume may not be the undisturbed ones

    def line(self) -> str:
        drawn, orders = input_orders.take_report()
        skipped = f"{self.batches} batches read again in {self.seconds:.1f} s{drawn}"
        problem = "; ".join(p for p in (self.problem, orders) if p)
        if problem:
            return f"; its input could not be put back where it was ({problem})"
        return f"; its input goes on where it was ({skipped})"


@dataclass
class _Fit:
    start_epoch: int      # the epoch the fit() call asked to start at
    data: Any             # its `x`, looked at for what cannot be replayed
    model: Any = None     # its optimizer's steps say where a resume is
    # its optimizer's steps when the call (or the run it continues) began; None: not known
    start_step: int | None = 0
    replay: Replay | None = None
    taken: bool = False   # the fit's training input was looked at (validation's is not)
    plan: tuple[int, int] | None = None   # Keras 3: (epochs, batches) done at the backup
    resumed_epochs: int = 0   # --resume-from: the epochs its checkpoint had done


@dataclass
class _Origin:
    """Where the run a `--resume-from` fit continues began, and its checkpoint's epochs."""

    epoch: int
    step: int | None
    epochs: int


_fit: _Fit | None = None
_origin: _Origin | None = None


def resuming(epoch: int, step: int | None, epochs: int) -> None:
    """The next fit continues a run begun at `epoch` with its optimizer at `step` (None:
    not recorded), from a checkpoint `epochs` epochs later (`--resume-from`)."""
    global _origin
    _origin = _Origin(epoch, step, epochs)


@contextlib.contextmanager
def watching(model: Any, initial_epoch: int | None, data: Any) -> Iterator[None]:
    """Around an outermost fit() of `model` starting at `initial_epoch` (the call's, before
    any backup moves it) on input `data`; its checkpoints record where its run began."""
    global _fit, _origin
    origin, _origin = _origin, None
    if origin is None:
        _fit = _Fit(int(initial_epoch or 0), data, model, start_step=optimizer_steps(model))
    else:
        _fit = _Fit(origin.epoch, data, model, start_step=origin.step,
                    resumed_epochs=origin.epochs)
    checkpointing.run_began(_fit.start_epoch, _fit.start_step)
    try:
        yield
    finally:
        _fit = None
        checkpointing.run_began(None, None)


def outcome() -> Replay | None:
    """How the running fit's input was replayed (None: it was not resumed)."""
    return _fit.replay if _fit is not None else None


def resume_at(model: Any, steps_per_epoch: int | None) -> int | None:
    """Keras 3, after its BackupAndRestore loaded: the epoch the running fit resumes at
    (None: it was not resumed), from the steps its restored optimizer has taken since the
    call began; the first epoch's loop then starts at the batch after them."""
    if _fit is None:
        return None
    done = _steps_done(model, steps_per_epoch or 0)
    if done <= 0 and not _fit.resumed_epochs:
        return None
    if not steps_per_epoch:   # --resume-from: the checkpoint's epoch, from its first batch
        _fit.replay = Replay(problem="the number of batches in an epoch is not known")
        return _fit.start_epoch + _fit.resumed_epochs if _fit.resumed_epochs else None
    _fit.plan = (done // steps_per_epoch, done % steps_per_epoch)
    return _fit.start_epoch + done // steps_per_epoch


def _steps_done(model: Any, steps_per_epoch: int) -> int:
    """The steps the running fit (or the run it continues) had taken at the state it
    resumes from: its restored optimizer's since it began; a checkpoint's whole epochs
    where that start is not known."""
    if _fit is None:
        return 0
    if _fit.start_step is None:
        return _fit.resumed_epochs * steps_per_epoch
    return optimizer_steps(model) - _fit.start_step


def install() -> None:
    """Patch the data handlers of tf-keras and Keras 3 when (or as soon as) imported."""
    import_hooks.when_imported("tf_keras.src.engine.data_adapter", _patch_tf_keras)
    import_hooks.when_imported("keras.src.trainers.epoch_iterator", _patch_keras3)
    input_orders.install()   # and a shared pipeline's shuffle orders, after a restart


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
        steps = guarded_patches.method(handler, "steps")   # starts at the step put here
        if "_initial_step" not in inspect.unwrap(steps).__code__.co_names:
            raise guarded_patches.TargetChanged("DataHandler.steps reads no _initial_step")
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
        _position_from_optimizer(self)
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
        first = next(epochs, None)
        if first is None:   # backed up at the fit's last step: nothing is left to train
            replay.seconds = time.perf_counter() - began
            return
        epoch, iterator = first
        _advance(iterator, batches, replay)
        replay.seconds = time.perf_counter() - began
        yield epoch, iterator
        yield from epochs

    enumerate_epochs._tfmw_replay = True   # type: ignore[attr-defined]
    handler.enumerate_epochs = enumerate_epochs


def _position_from_optimizer(handler) -> None:
    """tf-keras: put the training input's data handler at the epoch and step of the
    restored optimizer (see the module's docstring); its own counters stay when the
    epoch's length is not known or the optimizer counts no steps of this fit."""
    if _fit is None or _fit.taken:
        return
    steps = handler._inferred_steps
    if not steps and _fit.resumed_epochs:   # --resume-from: at least the checkpoint's epoch
        handler._initial_epoch = _fit.start_epoch + _fit.resumed_epochs
    done = _steps_done(_fit.model, steps or 0)
    if not steps or done <= 0:
        return
    handler._initial_epoch = _fit.start_epoch + done // steps
    handler._initial_step = done % steps


def _patch_keras3(module) -> None:
    def lookup():
        epochs = guarded_patches.attribute(module, "EpochIterator")
        method = guarded_patches.method(epochs, "_enumerate_iterator")
        if not getattr(method, "_tfmw_replay", False):
            for name in ("steps_per_epoch", "_get_iterator", "_current_iterator"):
                if name not in inspect.unwrap(method).__code__.co_names:
                    raise guarded_patches.TargetChanged(
                        f"EpochIterator._enumerate_iterator reads no {name}")
        return epochs

    guarded_patches.patch(
        "input_position.replay_keras3", "keras EpochIterator._enumerate_iterator", lookup,
        _replace_enumerate_iterator, library="keras",
        risk="a fit resumed from its backup runs the backup's epoch again from its first "
             "batch, on an input started from its first batch")


def _replace_enumerate_iterator(epochs) -> None:
    """Keras 3: each epoch's (step, step, iterator) triples; the first epoch after a
    resume starts at the backup's batch, its input advanced to there."""
    original = epochs._enumerate_iterator
    if getattr(original, "_tfmw_replay", False):
        return

    def _enumerate_iterator(self):
        plan, _fit_plan = (_fit.plan, _fit) if _fit is not None else (None, None)
        if plan is None or _fit_plan is None or _fit_plan.taken:
            yield from original(self)
            return
        _fit_plan.taken = True
        yield from _resumed_epoch(self, original, *plan)

    _enumerate_iterator._tfmw_replay = True   # type: ignore[attr-defined]
    epochs._enumerate_iterator = _enumerate_iterator


def _resumed_epoch(epoch_iterator, original, epochs_done: int, batches: int):
    """The first epoch's triples from batch `batches` on, after the `epochs_done` epochs and
    `batches` batches the backup had done were run through Keras' own loop (iterators made
    as it makes them: two an epoch when it makes one each epoch), their batches read, not
    trained on."""
    replay = Replay()
    if _fit is not None:
        _fit.replay = replay
    began = time.perf_counter()
    for _ in range(epochs_done):
        for begin, end, iterator in original(epoch_iterator):
            if not _advance(iterator, end - begin + 1, replay):
                break
    for begin, end, iterator in original(epoch_iterator):
        if begin < batches:                      # done before the backup
            _advance(iterator, end - begin + 1, replay)
            continue
        replay.seconds = replay.seconds or time.perf_counter() - began
        yield begin, end, iterator


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


def _advance(iterator, batches: int, replay: Replay) -> bool:
    """Read `batches` batches from `iterator` and drop them; False when it ran out."""
    if not replay.problem:
        replay.problem = _unrepeatable(_fit.data if _fit is not None else None)
    for _ in range(batches):
        try:
            next(iterator)
        except (StopIteration, LookupError) as exc:   # OutOfRangeError is a LookupError
            replay.problem = (f"it ended after {replay.batches} of the batches to skip "
                              f"({type(exc).__name__})")
            return False
        replay.batches += 1
    return True


def _unrepeatable(data: Any) -> str:
    """Why `data` gives other batches when read again ("" when it gives the same)."""
    if type(data).__module__.startswith("tensorflow.python.data") and unseeded_shuffle(data):
        return ("its pipeline shuffles without a seed, so the batches after the resume are "
                "another draw: give the shuffle a seed (`shuffle(n, seed=1)`)")
    return ""
