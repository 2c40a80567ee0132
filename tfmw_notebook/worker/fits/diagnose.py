"""Where a training step's time goes, measured on the live cluster (`%tfdist diagnose`).

Every worker runs `measure` at the same time (it uses the strategy's collectives)
and returns its own timings, in seconds:

    step         one training step of the model, as fit() runs it (train_function)
    communication  the step's collectives, launched together as the step launches
                 them: one all-reduce of tensors shaped like the model's gradients,
                 with the strategy's own collectives, and a one-number all-reduce for
                 each of the step's other collectives (counted in its graph)
    input        one batch from the input pipeline on its own (this worker's share of
                 the global batch, as fit() distributes it)
    compute      a local step on one batch: forward, backward and (tf-keras) the update
                 with the gradients applied unreduced; every worker at once, no
                 communication
    alone        the same on this worker while the others wait (its speed alone)

Each part is timed over `steps` calls in ROUNDS interleaved rounds; medians.

The model's variables and its optimizer's state are put back as they were, so the
diagnosis trains nothing.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from ..corrections import keras_flavour

DEFAULT_STEPS = 20
WARMUP_STEPS = 3
ROUNDS = 3


def last_fit() -> tuple:
    """(model, data, batch_size) of this worker's last fit(), or Nones."""
    from . import keras_hooks

    return keras_hooks.last_fit()


@dataclass
class LastMeasurement:
    """This worker's timings from its last `measure`: empty before the first, while one
    runs and after one failed, so a failed run never passes for the one before it."""

    timings: dict[str, float] = field(default_factory=dict)


_last = LastMeasurement()


def problem(model_name: str | None, data_name: str | None) -> str | None:
    """Why `measure` cannot run with these names (looked up in the worker's namespace),
    or None. Asked of the chief before every worker starts measuring together."""
    try:
        _chosen(model_name, data_name, None)
    except (LookupError, TypeError) as error:
        return str(error)
    return None


def measure(model_name: str | None = None, data_name: str | None = None,
            batch_size: int | None = None, steps: int = DEFAULT_STEPS) -> None:
    """Time this worker (see the module doc) for the named model and data, by default
    those of the last fit() in a %%tfdist cell; `last_result()` then holds them."""
    from ..common.shared_strategy import shared_strategy

    model, data, batch_size = _chosen(model_name, data_name, batch_size)
    dataset = _as_dataset(data, batch_size)
    saved = _snapshot(model)
    _last.timings = {}
    try:
        _last.timings = _timings(shared_strategy(), model, dataset, steps)
    finally:
        _put_back(model, saved)


def last_result() -> dict[str, float]:
    return dict(_last.timings)


def _chosen(model_name, data_name, batch_size) -> tuple:
    from IPython import get_ipython

    namespace = get_ipython().user_ns
    last_model, last_data, last_batch = last_fit()
    for name in (model_name, data_name):
        if name is not None and name not in namespace:
            raise LookupError(f"the workers have no variable named {name!r}")
    model = namespace[model_name] if model_name else last_model
    data = namespace[data_name] if data_name else last_data
    if model is None or data is None:
        raise LookupError("nothing to diagnose: no fit() has run in a %%tfdist cell yet; "
                          "train first, or name them: %tfdist diagnose --model M --data D")
    if keras_flavour.keras_of(model) is None or getattr(model, "optimizer", None) is None:
        raise TypeError(f"{model_name or 'the model'} is not a compiled Keras model "
                        f"({type(model).__name__}): compile() it first")
    return model, data, batch_size or (None if data_name else last_batch)


def _timings(strategy, model, dataset, steps: int) -> dict[str, float]:
    """Each part timed over `steps` calls, in ROUNDS interleaved rounds (the machine's
    speed drifts: a part timed only once could land in a slow spell); medians."""
    parts, batch, in_step = _parts(strategy, model, dataset)
    for action in parts.values():
        _timed(action, WARMUP_STEPS)                    # traces, fills pipelines
    rounds: dict[str, list[float]] = {name: [] for name in [*parts, "alone"]}
    for _ in range(ROUNDS):
        for name, action in parts.items():
            rounds[name].append(_timed(action, steps))
        rounds["alone"].append(_alone(strategy, parts["compute"], steps,
                                      barrier=parts["latency"]))
    median = {name: statistics.median(values) for name, values in rounds.items()}
    return {"step": median["step"], "communication": median["communication"],
            "latency": median["latency"], "collectives": in_step,
            "input": median["input"], "compute": median["compute"], "alone": median["alone"],
            # Keras 3: its step function against the same step run bare
            "framework": max(0.0, median["step"] - median["bare"]) if "bare" in median else 0.0,
            "steps": steps, "rounds": ROUNDS,
            "batch": _batch_size(strategy.experimental_local_results(batch)[0]),
            "gradient_bytes": sum(_bytes(v) for v in model.trainable_variables)}


def _parts(strategy, model, dataset) -> tuple[dict, Any, int]:
    """The actions to time, one batch, and how many collectives a training step launches."""
    import tensorflow as tf

    batches = iter(strategy.experimental_distribute_dataset(dataset))
    local = iter(strategy.experimental_distribute_dataset(dataset))
    train = _train_function(model)
    batch = next(local)

    @tf.function
    def read():
        return next(local)

    keras_2 = hasattr(train, "get_concrete_function")   # tf-keras: the step is a tf.function
    bare = train if keras_2 else _bare_step(strategy, model)
    in_step = _collectives(bare.get_concrete_function(batches))
    parts = {"step": lambda: train(batches),
             "communication": _step_collectives(strategy, model, in_step),
             "latency": _scalar_all_reduce(strategy), "input": read,
             "compute": _local_step(strategy, model, batch)}
    if keras_2:
        return parts, batch, in_step
    parts["bare"] = lambda: bare(batches)
    return _each_awaited(parts), batch, in_step


def _bytes(variable) -> int:
    """A variable's size (Keras 3 gives its shape as a tuple and its dtype as a name)."""
    import tensorflow as tf

    return math.prod(int(d) for d in variable.shape) * tf.as_dtype(variable.dtype).size


def _step_collectives(strategy, model, in_step: int):
    """The step's collectives launched together, as the step launches them: an all-reduce
    of tensors shaped like the model's gradients (made in replica context, as a step's
    gradients are, so the strategy adds its own collectives), and one-number all-reduces
    for the rest of the step's `in_step` (its losses and metrics). Together, not one after
    another: in the step they overlap, and their sum would exceed the step."""
    import tensorflow as tf

    shapes = [(v.shape, v.dtype) for v in model.trainable_variables]
    context = tf.distribute.get_replica_context
    total = tf.distribute.ReduceOp.SUM

    def gradients_like():
        return context().all_reduce(total, [tf.zeros(shape, dtype) for shape, dtype in shapes])

    @tf.function
    def gradients_only():
        return strategy.run(gradients_like)

    others = max(0, in_step - _collectives(gradients_only.get_concrete_function()))

    def step_like():
        return gradients_like(), [context().all_reduce(total, tf.constant(float(n)))
                                  for n in range(others)]

    @tf.function
    def all_of_them():
        return strategy.run(step_like)

    return all_of_them


def _scalar_all_reduce(strategy):
    """An all-reduce of one number: the collectives' latency, and a barrier."""
    import tensorflow as tf

    def one_number():
        return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM,
                                                              tf.constant(1.0))

    @tf.function
    def scalar_all_reduce():
        return strategy.run(one_number)

    return scalar_all_reduce


def _train_function(model):
    """fit()'s step function: tf-keras returns it, Keras 3 keeps it on the model."""
    made = model.make_train_function()
    return made if made is not None else model.train_function


def _bare_step(strategy, model):
    """Keras 3's training step with nothing around it: the model's train_step on every
    replica and its logs averaged over the workers, as fit() does each step (Keras 3's
    step function is Python around a tf.function; tf-keras' is the tf.function)."""
    import tensorflow as tf
    from keras.src.backend.tensorflow import trainer

    @tf.function
    def bare(iterator):
        outputs = strategy.run(model.train_step, args=(next(iterator),))
        return trainer.reduce_per_replica(outputs, strategy, reduction="auto")

    return bare


def _local_step(strategy, model, batch):
    """A step as fit() makes it, in replica context, but nothing in it talks to the other
    workers: tf-keras applies the gradients unreduced; Keras 3's optimizer always
    all-reduces them, so there the step stops at the gradients."""
    import tensorflow as tf

    if keras_flavour.keras_of(model) == 3:
        return _local_gradients(strategy, model, batch)

    def step(batch):
        x, y, weights = _unpack(batch)
        with tf.GradientTape() as tape:
            predictions = model(x, training=True)
            loss = model.compiled_loss(y, predictions, weights,
                                       regularization_losses=model.losses)
        variables = model.trainable_variables
        gradients = tape.gradient(loss, variables)
        model.optimizer.apply_gradients(zip(gradients, variables, strict=True),
                                        skip_gradients_aggregation=True)
        return loss

    @tf.function
    def local_step():
        return strategy.run(step, args=(batch,))

    return local_step


def _local_gradients(strategy, model, batch):
    """Keras 3's forward and backward pass, in replica context, with no all-reduce."""
    import tensorflow as tf

    def step(batch):
        x, y, weights = _unpack(batch)
        with tf.GradientTape() as tape:
            predictions = model(x, training=True)
            loss = model.compute_loss(x=x, y=y, y_pred=predictions, sample_weight=weights,
                                      training=True)
        gradients = tape.gradient(loss, model.trainable_variables)
        return tf.add_n([tf.reduce_sum(g) for g in gradients if g is not None])

    @tf.function
    def local_step():
        return strategy.run(step, args=(batch,))

    return local_step


def _alone(strategy, forward_backward, steps: int, *, barrier) -> float:
    """Each worker in turn times its local step while the others wait in `barrier` (an
    all-reduce: every worker passes it once all have arrived)."""
    rank = strategy.cluster_resolver.task_id
    mine = 0.0
    for turn in range(strategy.num_replicas_in_sync):
        if turn == rank:
            mine = _timed(forward_backward, steps)
        _timed(barrier, 1)
    return mine


_COLLECTIVE_OPS = ("CollectiveReduce", "CollectiveGather", "CollectiveBcast",
                   "CollectiveAllToAll")


def _collectives(concrete) -> int:
    """How many collective operations one call of a traced function launches."""
    graph = concrete.graph.as_graph_def()
    nodes = list(graph.node) + [n for f in graph.library.function for n in f.node_def]
    return sum(1 for node in nodes if node.op.startswith(_COLLECTIVE_OPS))


def _each_awaited(parts: dict) -> dict:
    """Keras 3's fit waits for each step to end (it asks whether the next batch exists
    before starting another), so its step is a sum of latencies: each part is timed
    the same way, waiting for every call, not only the last."""
    def awaited(action):
        return lambda: _awaited(action())

    return {name: awaited(action) for name, action in parts.items()}


def _timed(action, count: int) -> float:
    """Seconds per call of `action`, `count` calls, waiting for the last result."""
    began = time.perf_counter()
    result = None
    for _ in range(count):
        result = action()
    _awaited(result)
    return (time.perf_counter() - began) / count


def _awaited(result):
    """`result`, once the device has finished computing it."""
    import tensorflow as tf

    for tensor in tf.nest.flatten(result, expand_composites=True):
        if hasattr(tensor, "numpy"):
            tensor.numpy()
    return result


def _as_dataset(data, batch_size: int | None):
    """The data as fit() would read it: a tf.data pipeline, or (x, y) arrays batched by
    the global `batch_size` (Keras' default 32); repeated so the measurement never
    runs out."""
    import tensorflow as tf

    if isinstance(data, tf.data.Dataset):
        return data.repeat()
    return tf.data.Dataset.from_tensor_slices(tuple(data) if isinstance(data, list) else data
                                              ).batch(batch_size or 32).repeat()


def _unpack(batch):
    if isinstance(batch, (tuple, list)):
        x = batch[0]
        y = batch[1] if len(batch) > 1 else None
        weights = batch[2] if len(batch) > 2 else None
        return x, y, weights
    return batch, None, None


def _batch_size(batch) -> int:
    import tensorflow as tf

    features = _unpack(batch)[0]
    return int(tf.shape(tf.nest.flatten(features)[0])[0])


def _snapshot(model) -> list:
    return [v.numpy() for v in _state(model)]


def _put_back(model, saved: list) -> None:
    # Not strict: slots the optimizer first made during the measurement come last in
    # _state and had no value before; they keep theirs.
    for variable, value in zip(_state(model), saved, strict=False):
        variable.assign(value)
    model.reset_metrics()


def _state(model) -> list:
    slots = model.optimizer.variables
    return list(model.variables) + list(slots() if callable(slots) else slots)
