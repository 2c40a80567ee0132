"""Each worker its share of every batch a cell's own loop takes from a tf.data pipeline.

A custom loop written for one process iterates its dataset itself (`for x, y in train_ds:`).
On N workers that would give every worker every batch: correct once gradients are averaged
(cross_replica_steps.py), but N times the work. So when a `%%tfdist` cell's own code (a
cell's line, or a function a cell defined) iterates a batched pipeline in the shared
strategy's cross-replica context, each worker gets its rows of each batch: worker r of N
the rows [r*B/N, (r+1)*B/N) of a batch of B (a batch of fewer than N rows goes whole to
everyone). The workers' averaged gradients are then the global batch's, as one process
computes it (exactly when B divides by N; a last, uneven batch weights its parts equally).

Left whole (every worker every batch, as today): iteration by library code (Keras'
`fit`/`adapt`, `as_numpy_iterator`), pipelines that do not end in a `batch` through
row-keeping steps (a dataset of single examples must not lose rows of an example), batches
that are not dense tensors, pipelines over a `--shard` (already each worker's own rows),
iteration inside a `tf.function`, and code under `strategy.run` or a distributed dataset.
A cell whose steps averaged gradients over batches left whole gets one line saying so.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

from ..common import guarded_patches, identity, shared_strategy
from . import cross_replica_steps

CELL_PREFIX = "<tfdist-cell-"   # the filename a %%tfdist cell's code is compiled under
_PACKAGE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep

_BATCHING = {"_BatchDataset", "_ParallelBatchDataset", "_PaddedBatchDataset"}
_ROW_WISE = {"_MapDataset", "_ParallelMapDataset"}   # one batch in, one batch out
_LONGEST = 64


class _Cell(threading.local):
    split = False     # this cell's code iterated a pipeline split between the workers
    noted = False     # the "left whole" line was given in this cell
    unseeded = False  # the "unseeded shuffle" line was given in this cell


_cell = _Cell()


@contextlib.contextmanager
def during_cell() -> Iterator[None]:
    """Around a cell's code: what it splits is its own; a cell that ends well and averaged
    gradients over whole batches says so (note_if_whole)."""
    _cell.split = _cell.noted = _cell.unseeded = False
    cross_replica_steps.notes.averaged = False
    yield
    note_if_whole(identity.rank())


def batched(dataset: Any) -> bool:
    """Whether the pipeline's elements are batches: its last row-changing step is a batch,
    reached through steps that keep each batch's rows together."""
    from tensorflow.python.data.ops import dataset_ops

    node = dataset
    for _ in range(_LONGEST):
        name = type(node).__name__
        if name in _BATCHING:
            return True
        if not (name in _ROW_WISE
                or isinstance(node, dataset_ops.UnaryUnchangedStructureDataset)):
            return False
        node = getattr(node, "_input_dataset", None)
        if node is None:
            return False
    return False


def _dense_batches(dataset: Any) -> bool:
    import tensorflow as tf

    specs = tf.nest.flatten(dataset.element_spec)
    return bool(specs) and all(isinstance(spec, tf.TensorSpec) and spec.shape.rank
                               for spec in specs)


def unseeded_shuffle(dataset: Any) -> bool:
    """Whether the pipeline shuffles with no seed, op-level or global (tf.data then holds the
    seeds 0 and 0, which a seeded shuffle never does): each worker's order is its own, and
    their shares of a batch are not one batch."""
    import tensorflow as tf

    node = dataset
    for _ in range(_LONGEST):
        if node is None:
            return False
        if type(node).__name__ == "_ShuffleDataset":
            seeds = [tf.get_static_value(getattr(node, name, None)) for name in
                     ("_seed", "_seed2")]
            if all(seed is not None and int(seed) == 0 for seed in seeds):
                return True
        node = getattr(node, "_input_dataset", None)
    return False


def _note_unseeded(dataset: Any, rank: int) -> None:
    if rank != 0 or _cell.unseeded or not unseeded_shuffle(dataset):
        return
    _cell.unseeded = True
    print("tfmw_notebook: this pipeline shuffles without a seed, so each worker shuffles "
          "its own way and their shares of a batch are not one batch (rows repeat or are "
          "missed in an epoch): give the shuffle a seed (`shuffle(n, seed=1)`) or call "
          "`tf.keras.utils.set_random_seed(1)` before building the pipeline.",
          file=sys.stderr, flush=True)


def _over_a_shard(dataset: Any) -> bool:
    from ..data import sharded_pipelines, shards

    held = set(shards.live_rows().values())
    found = sharded_pipelines.source_rows(dataset) if held else None
    return found is not None and found[0] in held


def splittable(dataset: Any) -> bool:
    """A pipeline whose batches this worker can take its rows of (see the module's text)."""
    return batched(dataset) and _dense_batches(dataset) and not _over_a_shard(dataset)


def rows_of(element: Any, rank: int, workers: int) -> Any:
    """Worker `rank`'s rows of a batch (every component cut alike; whole when smaller than
    `workers`)."""
    import tensorflow as tf

    size = tf.shape(tf.nest.flatten(element)[0], out_type=tf.int64)[0]
    whole = size < workers
    start = tf.where(whole, tf.constant(0, tf.int64), size * rank // workers)
    stop = tf.where(whole, size, size * (rank + 1) // workers)
    return tf.nest.map_structure(lambda tensor: tensor[start:stop], element)


_share_iterator: list[type] = []   # the class, made once TensorFlow is imported


def share_of(dataset: Any, rank: int, workers: int) -> Any:
    """An iterator over `dataset` giving worker `rank` its rows of each batch.

    The rows are cut as each batch leaves the iterator, not by a step added to the pipeline:
    the iterator stays one of the user's own pipeline, the same on every worker, so
    `tf.train.Checkpoint(iterator=...)` saves and restores the same state everywhere
    (measured: with a `map` added, a restore rebuilt the pipeline from the chief's saved
    graph, and worker 1 then took the chief's rows).
    """
    if not _share_iterator:
        from tensorflow.python.data.ops import iterator_ops

        class ShareIterator(iterator_ops.OwnedIterator):
            """The pipeline's own iterator; each element cut to this worker's rows."""

            def __init__(self, dataset: Any, rank: int, workers: int):
                super().__init__(dataset)
                self._tfmw_share = (rank, workers)

            def _next_internal(self):
                return rows_of(super()._next_internal(), *self._tfmw_share)

        _share_iterator.append(ShareIterator)
    return _share_iterator[0](dataset, rank, workers)


def _colocated(dataset: Any) -> Any:
    """Where TensorFlow's own `__iter__` makes the iterator (with its pipeline)."""
    from tensorflow.python.framework import ops

    return ops.colocate_with(dataset._variant_tensor)


def _from_a_cell(frame: Any) -> bool:
    """Whether the call came from a cell's own code: the first frame outside this package
    (another of its corrections may wrap `__iter__` around this one: input_orders.py)."""
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame = frame.f_back
    return frame is not None and frame.f_code.co_filename.startswith(CELL_PREFIX)


def _worker_share() -> tuple[int, int] | None:
    """(this worker's rank, the number of workers) when a cell's loop may be split."""
    strategy = cross_replica_steps.multi_worker_cross_replica()
    if strategy is None:
        return None
    local = len(strategy.extended.worker_devices)
    workers = strategy.num_replicas_in_sync // local
    resolver = strategy.cluster_resolver
    return int(resolver.task_id), workers


def split_cell_loops() -> None:
    """`iter(dataset)` from a cell's own code gives this worker's share of each batch."""
    from tensorflow.python.data.ops import dataset_ops

    def wrap(original: Callable) -> Callable:
        def __iter__(self):
            if _from_a_cell(sys._getframe(1)):
                share = _worker_share()
                if share is not None and splittable(self):
                    _cell.split = True
                    _note_unseeded(self, share[0])
                    with _colocated(self):
                        return share_of(self, *share)
            return original(self)
        return __iter__

    def apply(cls: Any) -> None:
        original = cls.__iter__
        if getattr(original, "_tfmw_split", False):
            return
        replacement = wrap(original)
        replacement._tfmw_split = True   # type: ignore[attr-defined]
        cls.__iter__ = replacement

    guarded_patches.patch(
        "loop_batches.split_cell_loops", "tensorflow DatasetV2.__iter__",
        lambda: (guarded_patches.attribute(dataset_ops.DatasetV2, "__iter__"),
                 guarded_patches.attribute(dataset_ops, "UnaryUnchangedStructureDataset"),
                 dataset_ops.DatasetV2)[-1],
        apply,
        risk="a custom loop's batches are not split between the workers (each computes "
             "every batch: correct, not faster)", library="tensorflow")


def note_if_whole(rank: int) -> None:
    """Once per cell, on the chief: the cell's steps averaged gradients over batches every
    worker computed whole (printed: a warning would show once per process)."""
    if rank != 0 or _cell.noted or _cell.split or not cross_replica_steps.notes.averaged:
        return
    _cell.noted = True
    strategy = shared_strategy.shared_strategy()
    workers = strategy.num_replicas_in_sync // len(strategy.extended.worker_devices)
    print(f"tfmw_notebook: this cell's training steps computed every batch on each of the "
          f"{workers} workers (correct, not faster): iterate a batched tf.data pipeline in "
          "the cell (`for x, y in dataset:`), give the data with `%%tfdist --shard`, or use "
          "`strategy.experimental_distribute_dataset` to split each batch between them.",
          file=sys.stderr, flush=True)
