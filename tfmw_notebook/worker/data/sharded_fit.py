"""fit() and evaluate() on rows each worker holds only its share of (`%%tfdist --shard`).

Given in-memory arrays, Keras under a multi-worker strategy assumes every worker holds
all the rows and keeps 1/N of them (measured: each worker trained on half of its own
shard at N = 2), and it counts steps from its own rows, so a worker with one row more
than the others runs one step more and pairs the wrong collectives (measured: "Collective
instance 116 expected ... data_type 9 but got ... data_type 1").

So while a worker holds shards, a call given in-memory data (NumPy, pandas, tensors, and
tuples, lists or dicts of them, or a tf.data pipeline that slices and batches them:
sharded_pipelines.py) first asks every worker, in one all-reduce, how many rows
it has and whether that is the row count of a shard it holds. The rows are each worker's
own when any worker's are a shard's (the shard or something made from it row for row)
or when the counts differ (e.g. filtered shards); equal counts that no shard has are
data every worker holds whole (Keras' own sharding applies, as without shards). Own rows
feed the worker's replicas at the global batch's share, with no further sharding, and
every worker takes the same number of steps: the most any worker needs (ceil(rows /
batch) when the batch divides evenly), a worker with fewer rows giving an empty batch
(no gradient) on its last. Every row once an epoch, shuffled anew each epoch when
`shuffle`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from ..common import shared_strategy
from . import sharded_pipelines as pipelines
from . import shards

_ARRAY_ARGUMENTS = ("x", "y", "sample_weight")
_DEFAULT_BATCH = 32   # Keras' default batch_size


def applies(x: Any) -> bool:
    """Whether a call with this `x` must ask the others (see the module's text): this
    worker holds shards and `x` is in-memory data, or a pipeline that slices it."""
    return bool(shards.live_rows()) and x is not None and (
        _in_memory(x) or pipelines.source_rows(x) is not None)


def rewrite(kwargs: dict[str, Any], *, training: bool) -> bool:
    """Replace the call's data (and validation arrays) by a pipeline of this worker's own
    rows, when the workers agree they are theirs; returns whether it did."""
    batch = int(kwargs.get("batch_size") or _DEFAULT_BATCH)
    split = float(kwargs.get("validation_split") or 0.0) if training else 0.0
    arrays = tuple(kwargs.get(name) for name in _ARRAY_ARGUMENTS)
    if not _in_memory(arrays[0]):
        plan = _Plan.of_pipeline(arrays[0])
    else:
        if split:
            arrays, held_out = _split_off(arrays, split)
        plan = _Plan.of(arrays, batch)
    steps_name = "steps_per_epoch" if training else "steps"
    steps = _agreed_steps(plan, kwargs.get(steps_name)) if plan is not None else None
    if plan is None or steps is None:
        return False
    for name in ("batch_size", *_ARRAY_ARGUMENTS):
        kwargs.pop(name, None)
    kwargs["x"] = plan.dataset(steps, shuffle=training and bool(kwargs.pop("shuffle", True)))
    kwargs[steps_name] = steps
    if training:
        kwargs["shuffle"] = False   # done per worker above; Keras would warn it ignores it
        if split and _in_memory(arrays[0]):
            kwargs["validation_data"] = held_out
            kwargs.pop("validation_split", None)
        _validation(kwargs, batch)
    return True


def own_predictions(model, x: Any, batch_size: int | None) -> Any:
    """`model.predict(x)` of a worker's own rows (agreed as for fit), computed on this
    worker alone, in order, as NumPy; None when the rows are data held whole (Keras'
    predict then runs as always). Keras' own predict on per-worker rows of unequal counts
    waits forever in a collective (measured: 5 and 4 rows on 2 workers)."""
    if not _in_memory(x):
        return None
    import numpy as np
    import tensorflow as tf

    tensors = _as_tensors(x)
    rows = int(tf.nest.flatten(tensors)[0].shape[0])
    shard_rows = set(shards.live_rows().values())
    seen = _gathered([rows, float(rows in shard_rows), 0.0])
    if not (any(matched for _, matched, _ in seen) or len({r for r, _, _ in seen}) > 1):
        return None
    step = int(batch_size or _DEFAULT_BATCH)
    forward = tf.function(lambda batch: model(batch, training=False))
    outputs = [forward(_rows(tensors, start, start + step))   # no rows: one empty batch
               for start in (range(0, rows, step) if rows else [0])]
    return tf.nest.map_structure(lambda *parts: np.concatenate([p.numpy() for p in parts]),
                                 *outputs)


def _validation(kwargs: dict[str, Any], batch: int) -> None:
    """Validation arrays are the workers' own rows too (the training data was)."""
    validation = kwargs.get("validation_data")
    if not isinstance(validation, (tuple, list)) or not all(
            part is None or _in_memory(part) for part in validation):
        return
    plan = _Plan.of((*validation, None, None)[:3],
                    int(kwargs.pop("validation_batch_size", None) or batch))
    steps = kwargs.get("validation_steps") or _most_over_workers(plan)
    kwargs["validation_data"] = plan.dataset(steps, shuffle=False)
    kwargs["validation_steps"] = steps


class _Plan:
    """This worker's rows of one call and how its replicas take them: `epoch(shuffle)`
    gives one pass over them in per-replica batches, `empty` is a batch of no rows."""

    def __init__(self, rows: int, per_replica: int, epoch: Callable[[bool], Any], empty: Any):
        strategy = shared_strategy.shared_strategy()
        self.rows, self.per_replica, self.epoch, self.empty = rows, per_replica, epoch, empty
        self.local_replicas = max(1, len(strategy.extended.worker_devices))
        self.batches = math.ceil(rows / per_replica)
        self.own_steps = math.ceil(self.batches / self.local_replicas)

    @classmethod
    def of(cls, arrays: tuple, batch: int) -> _Plan:
        import tensorflow as tf

        tensors = tuple(_as_tensors(a) for a in arrays if a is not None)
        rows = int(tf.nest.flatten(tensors)[0].shape[0])
        per_replica = _per_replica(batch)

        def epoch(shuffle: bool):
            data = tf.data.Dataset.from_tensor_slices(tensors)
            if shuffle:
                data = data.shuffle(max(1, rows), reshuffle_each_iteration=True)
            return data.batch(per_replica)

        return cls(rows, per_replica, epoch, tf.nest.map_structure(lambda t: t[:0], tensors))

    @classmethod
    def of_pipeline(cls, dataset) -> _Plan | None:
        """The plan of a pipeline that slices arrays into batches (pipelines.py), or None
        (it is left as it is)."""
        found, empty = pipelines.source_rows(dataset), pipelines.empty_batch(dataset)
        if found is None or empty is None:
            return None
        rows, batch = found
        per_replica = _per_replica(batch)
        return cls(rows, per_replica, lambda shuffle: dataset.unbatch().batch(per_replica),
                   empty)

    def dataset(self, steps: int, *, shuffle: bool) -> Any:
        """`steps` steps of this worker's rows an epoch (padded with empty batches),
        repeated for the epochs, as the strategy's distributed dataset."""
        import tensorflow as tf

        data = self.epoch(shuffle)
        wanted = steps * self.local_replicas
        if wanted > self.batches:
            data = data.concatenate(
                tf.data.Dataset.from_tensors(self.empty).repeat(wanted - self.batches))
        data = data.take(wanted).repeat()
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = \
            tf.data.experimental.AutoShardPolicy.OFF
        data = data.with_options(options)
        return shared_strategy.shared_strategy().distribute_datasets_from_function(
            lambda context: data)


def _per_replica(batch: int) -> int:
    return max(1, batch // shared_strategy.shared_strategy().num_replicas_in_sync)


def _agreed_steps(plan: _Plan, steps: int | None) -> int | None:
    """Steps an epoch when the rows are the workers' own (None when every worker holds the
    same number of rows and none is a shard's: data held whole)."""
    shard_rows = set(shards.live_rows().values())
    seen = _gathered([plan.rows, float(plan.rows in shard_rows), plan.own_steps])
    own = any(matched for _, matched, _ in seen) or len({rows for rows, _, _ in seen}) > 1
    if not own:
        return None
    return int(steps) if steps else int(max(most for _, _, most in seen))


def _most_over_workers(plan: _Plan) -> int:
    return int(max(most for _, _, most in _gathered([plan.rows, 0.0, plan.own_steps])))


def _gathered(values: list[float]) -> list[tuple[float, ...]]:
    """Every replica's `values` (one all-reduce: every worker calls it), in replica order:
    each replica puts its own at its place in a vector of zeros."""
    import tensorflow as tf

    width = len(values)
    if _gather.function is None or _gather.width != width:
        strategy = shared_strategy.shared_strategy()
        slots = strategy.num_replicas_in_sync

        def replica_values(local):
            context = tf.distribute.get_replica_context()
            place = tf.one_hot(context.replica_id_in_sync_group, slots, dtype=tf.float64)
            mine = tf.reshape(place[:, None] * local[None, :], [-1])
            return context.all_reduce(tf.distribute.ReduceOp.SUM, mine)

        @tf.function
        def gather(local):
            return strategy.experimental_local_results(
                strategy.run(replica_values, args=(local,)))[0]

        _gather.function, _gather.width = gather, width
    flat = _gather.function(tf.constant(values, tf.float64)).numpy().tolist()
    return [tuple(flat[i:i + width]) for i in range(0, len(flat), width)]


class _Gather:
    """The all-reduce, traced once per worker process (the strategy lives as long)."""

    function: Any = None
    width = 0


_gather = _Gather()


def _rows(tensors: Any, start: int, stop: int) -> Any:
    import tensorflow as tf

    return tf.nest.map_structure(lambda t: t[start:stop], tensors)


def _split_off(arrays: tuple, fraction: float) -> tuple[tuple, tuple]:
    """Keras' validation_split, on this worker's rows: the last `fraction` of them."""
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"Invalid value for argument `validation_split`. Received: "
                         f"validation_split={fraction}. Expected a number between 0 and 1")
    import tensorflow as tf

    tensors = tuple(None if a is None else _as_tensors(a) for a in arrays)
    rows = int(tf.nest.flatten([t for t in tensors if t is not None])[0].shape[0])
    cut = rows - int(rows * fraction)

    def part(start, stop):
        return tuple(None if t is None else tf.nest.map_structure(lambda v: v[start:stop], t)
                     for t in tensors)

    return part(0, cut), part(cut, rows)


def _as_tensors(value: Any) -> Any:
    """Arrays, frames and tensors as TensorFlow sees them (DataFrames as their values,
    dicts and sequences of them kept as structures)."""
    import numpy as np
    import tensorflow as tf

    if isinstance(value, dict):
        return {key: _as_tensors(item) for key, item in value.items()}
    if isinstance(value, (tuple, list)):
        return tuple(_as_tensors(item) for item in value)
    if tf.is_tensor(value):
        return value
    if hasattr(value, "to_numpy"):   # a pandas DataFrame or Series
        value = value.to_numpy()
    return tf.convert_to_tensor(np.asarray(value))


def _in_memory(value: Any) -> bool:
    if isinstance(value, dict):
        return bool(value) and all(_in_memory(item) for item in value.values())
    if isinstance(value, (tuple, list)):
        return bool(value) and all(_in_memory(item) for item in value)
    module = type(value).__module__
    if module.startswith(("numpy", "pandas")):
        return len(getattr(value, "shape", ())) > 0
    return module.startswith("tensorflow") and type(value).__name__ in ("EagerTensor",
                                                                         "Tensor")
