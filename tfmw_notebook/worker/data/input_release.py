"""Free a finished fit's input pipeline off the cell's path, on a thread of its own.

Freeing a tf.data iterator waits for its background threads to end, and on these workers
that wait, after the last step of a fit, took 0.2-0.55 s in about a third of the fits
(a native stack in the gap: `RootDataset::Iterator::~Iterator` waiting in
`UnboundedThreadPool`; benchmarks/README.md). Keras frees the iterator when `fit` returns,
so every worker's cell waited for it. Here the iterators an outermost fit or evaluate made
stay referenced until the call returns, then a release thread drops them: the wait happens
there, with the GIL released, while the cell goes on. Measured on 2 workers (the benchmark's
dense job, 10 alternated pairs, benchmarks/input_release.py): cells 1.55 s -> 1.01 s median
with Keras 3 (9 of 10 stalled -> none), 1.60 s -> 1.24 s with tf-keras (7 -> none).

Bounded: when `MAX_PENDING` releases are still waiting, the next one is done in place, as
Keras would (a cell that calls `fit` in a tight loop keeps at most that many pipelines
alive). Keras 3 (`TFEpochIterator`) and tf-keras (`DataHandler`'s epoch iterator) are
covered, each patched when a cell's Keras is first imported.
"""

from __future__ import annotations

import contextlib
import functools
import queue
import threading
from collections.abc import Iterator
from typing import Any

from ..common import guarded_patches
from ..common.import_hooks import when_imported

MAX_PENDING = 4
THREAD_NAME = "tfmw-input-release"

_MARK = "_tfmw_input_release"   # set on every replacement, so nothing is patched twice
_KERAS3_TRAINER = "keras.src.backend.tensorflow.trainer"
_TF_KERAS_DATA = "tf_keras.src.engine.data_adapter"

_kept: list[Any] | None = None      # while an outermost call runs: the iterators it made
_pending: queue.Queue[list[Any]] = queue.Queue()
_thread: threading.Thread | None = None
_thread_lock = threading.Lock()


def install() -> None:
    """Patch Keras' input iterators once a cell's Keras is imported (now, if it is)."""
    when_imported(_KERAS3_TRAINER, _keep_keras3_epoch_iterators)
    when_imported(_TF_KERAS_DATA, _keep_tf_keras_epoch_iterators)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Around an outermost fit/evaluate: the iterators it makes are freed after it, on
    the release thread. Nested uses are part of the outer one."""
    global _kept
    if _kept is not None:
        yield
        return
    _kept = []
    try:
        yield
    finally:
        kept, _kept = _kept, None
        _release(kept)


def pending() -> int:
    """Releases not done yet (for tests)."""
    return _pending.qsize()


def _keep(iterator: Any) -> None:
    if _kept is not None and not any(kept is iterator for kept in _kept):
        _kept.append(iterator)


def _release(kept: list[Any]) -> None:
    if not kept:
        return
    if _pending.qsize() >= MAX_PENDING:
        kept.clear()        # the release thread is behind: free them here, as Keras would
        return
    _start_thread()
    _pending.put(kept)


def _start_thread() -> None:
    global _thread
    with _thread_lock:
        if _thread is None or not _thread.is_alive():
            _thread = threading.Thread(target=_release_forever, name=THREAD_NAME, daemon=True)
            _thread.start()


def _release_forever() -> None:
    while True:
        kept = _pending.get()
        kept.clear()        # the last references: TensorFlow frees the pipelines here
        del kept


_RISK = "a fit's input pipeline is freed when fit returns, as Keras does (up to 0.5 s a fit)"


def _keep_keras3_epoch_iterators(trainer: Any) -> None:
    guarded_patches.patch(
        "input_release", f"{_KERAS3_TRAINER}.TFEpochIterator.__init__",
        lambda: guarded_patches.attribute(trainer, "TFEpochIterator"),
        _keep_each_epoch_iterator, risk=_RISK, library="keras")


def _keep_each_epoch_iterator(epoch_iterator: Any) -> None:
    """Keras 3: each TFEpochIterator holds its epoch's tf.data iterator."""
    init = epoch_iterator.__init__
    if getattr(init, _MARK, False):
        return

    @functools.wraps(init)
    def init_and_keep(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        _keep(self)
    setattr(init_and_keep, _MARK, True)
    setattr(epoch_iterator, "__init__", init_and_keep)  # noqa: B010 (mypy: a method)


def _keep_tf_keras_epoch_iterators(data_adapter: Any) -> None:
    """tf-keras: DataHandler.enumerate_epochs yields each epoch's tf.data iterator. The
    newest of each handler is kept; one it replaces (the next epoch's, or the next
    validation pass's on the same handler) is freed as before, so they do not pile up."""
    guarded_patches.patch(
        "input_release", f"{_TF_KERAS_DATA}.DataHandler.enumerate_epochs",
        lambda: guarded_patches.attribute(data_adapter, "DataHandler"),
        _keep_newest_epoch_iterator, risk=_RISK, library="tf_keras")


def _keep_newest_epoch_iterator(handler: Any) -> None:
    enumerate_epochs = guarded_patches.method(handler, "enumerate_epochs")
    if getattr(enumerate_epochs, _MARK, False):
        return

    @functools.wraps(enumerate_epochs)
    def enumerate_and_keep(self: Any) -> Iterator[tuple[int, Any]]:
        for epoch, iterator in enumerate_epochs(self):
            newest = getattr(self, _MARK, None)   # its id: the handler must not keep it alive
            if id(iterator) != newest:
                _drop(newest)
                setattr(self, _MARK, id(iterator))
                _keep(iterator)
            yield epoch, iterator
    setattr(enumerate_and_keep, _MARK, True)
    handler.enumerate_epochs = enumerate_and_keep


def _drop(iterator_id: int | None) -> None:
    """Stop keeping the iterator of that id: it is freed here, as Keras would."""
    if _kept is not None and iterator_id is not None:
        _kept[:] = [kept for kept in _kept if id(kept) != iterator_id]
