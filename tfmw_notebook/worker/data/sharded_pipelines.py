"""Which tf.data pipelines sharded_fit.py can take over: those that slice in-memory rows
and batch them, keeping every row (`from_tensor_slices`, then `map`, `shuffle`, `cache`,
`prefetch`, `repeat` or options, and one `batch`). Their row count is read at the source
and their batch size at the batch; other pipelines (files, `filter`, `zip`, ...) are left
as they are, Keras' own sharding applying.
"""

from __future__ import annotations

from typing import Any

# Dataset classes (tf.data's own names) that pass every row on: one input, no row dropped.
_ROW_KEEPING = {"_MapDataset", "_ParallelMapDataset", "_ShuffleDataset", "_CacheDataset",
                "_PrefetchDataset", "_OptionsDataset", "_RepeatDataset"}
_BATCHING = {"_BatchDataset", "_ParallelBatchDataset"}
_LONGEST = 32   # a pipeline is a short chain


def source_rows(dataset: Any) -> tuple[int, int] | None:
    """(rows at the source, the batch size) of a pipeline sharded_fit can take, else None."""
    batch, node = None, dataset
    for _ in range(_LONGEST):
        name = type(node).__name__
        if name == "_TensorSliceDataset":
            tensors = getattr(node, "_tensors", None)
            if batch is None or not tensors or tensors[0].shape.rank in (None, 0):
                return None
            return int(tensors[0].shape[0]), batch
        if name in _BATCHING:
            if batch is not None or bool(getattr(node, "_drop_remainder", False)):
                return None
            batch = int(node._batch_size)
        elif name not in _ROW_KEEPING:
            return None
        node = getattr(node, "_input_dataset", None)
        if node is None:
            return None
    return None


def empty_batch(dataset: Any) -> Any:
    """A batch of no rows shaped like the pipeline's batches, or None when a batch's other
    dimensions are not fixed (no empty batch can stand in for one)."""
    import tensorflow as tf

    specs = tf.nest.flatten(dataset.element_spec)
    if not all(isinstance(spec, tf.TensorSpec) and spec.shape.rank is not None
               and spec.shape[1:].is_fully_defined() for spec in specs):
        return None
    return tf.nest.map_structure(lambda spec: tf.zeros([0, *spec.shape[1:]], spec.dtype),
                                 dataset.element_spec)
