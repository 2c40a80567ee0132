"""Training steps written for one process, run on every worker outside `strategy.run`.

A custom loop from a single-process tutorial (a `tf.GradientTape` step, the optimizer applied
by hand, a Python `for` over a dataset) runs in a `%%tfdist` cell in the shared strategy's
*cross-replica* context, where TensorFlow and Keras expect only code that calls
`strategy.run`. Measured on 2 workers (TF 2.21, tf-keras 2.21, Keras 3.15), such a step
fails at its first line that touches the strategy: tf-keras refuses a loss with the default
reduction, `tape.gradient` raises "DistributedVariable.handle is not available outside the
replica context", the optimizers' apply calls `merge_call` on a replica context that does not
exist, and a metric's `assign_add` on its sum-aggregated state raises.

Each correction below makes one of those lines do what the same line does in one process,
with the workers kept in step:

- `tape.gradient` differentiates with respect to the variables' local copies (what the
  forward pass read) and returns the gradients averaged over the workers, in one all-reduce
  per dtype: every worker applies the same update, so the weights stay identical, and when
  each worker computed its share of the batch (loop_batches.py) the average is the global
  batch's gradient, as one process computes it;
- the optimizers apply those gradients as given (no second aggregation);
- a loss with the default reduction averages over the batch it is given (tf-keras raises;
  Keras 3 would also divide it by the number of replicas, meant for `strategy.run`);
- a metric's state update in a step adds this worker's part to its own copy; reading the
  metric then sums the parts over the workers (as tf.distribute reads it), so its value is
  the global batch's;
- a Keras 3 BatchNormalization's moving statistics are averaged over the workers when
  written (tf-keras keeps them synchronized on read already).

Invariant: each correction acts only in cross-replica context, outside an update, under a
strategy in multi-worker mode, where the line it corrects failed (or, for Keras 3's loss and
metric, computed a per-replica quantity); inside `strategy.run`, in Keras' fit, or with one
worker, TensorFlow and Keras run their own code. Patches go through guarded_patches.py.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ..common import guarded_patches
from ..common.import_hooks import when_imported

_MARK = "_tfmw_cross_replica_step"
_RISK = ("a training step written for one process (tape.gradient and the optimizer outside "
         "strategy.run) fails on the workers")


class _Notes(threading.local):
    """What the running cell's steps have done (reset by loop_batches.begin_cell)."""

    averaged = False   # a step averaged gradients over the workers


notes = _Notes()


def multi_worker_cross_replica() -> Any:
    """The strategy, when code runs in its cross-replica context, outside an update, and it
    spans several workers; else None."""
    import tensorflow as tf
    from tensorflow.python.distribute import values_util

    if not tf.distribute.has_strategy() or not tf.distribute.in_cross_replica_context():
        return None
    if values_util.in_replica_update_context():
        return None
    strategy = tf.distribute.get_strategy()
    in_multi_worker = getattr(strategy.extended, "_in_multi_worker_mode", None)
    return strategy if in_multi_worker is not None and in_multi_worker() else None


def _marked(original: Callable, replacement: Callable) -> Callable:
    replacement.__wrapped__ = original            # type: ignore[attr-defined]
    replacement.__name__ = getattr(original, "__name__", "correction")
    replacement.__doc__ = getattr(original, "__doc__", None)
    setattr(replacement, _MARK, True)
    return replacement


def _set(owner: Any, name: str, wrap: Callable[[Callable], Callable]) -> None:
    original = getattr(owner, name)
    if getattr(original, _MARK, False):
        return
    setattr(owner, name, _marked(original, wrap(original)))


# --- gradients -------------------------------------------------------------------------


def _distributed_component(source: Any) -> Any:
    """The distributed variable behind `source` (itself, or a Keras 3 variable's), else None."""
    from tensorflow.python.distribute import values as tf_values

    for candidate in (source, getattr(source, "_value", None)):
        if (isinstance(candidate, tf_values.DistributedVariable)
                and not isinstance(candidate, tf_values.SyncOnReadVariable)):
            return candidate
    return None


def mean_over_workers(strategy: Any, tensors: list[Any]) -> list[Any]:
    """Each tensor averaged over the workers: one all-reduce per dtype, in cross-replica
    context (eager or traced). Every local replica carries the worker's value."""
    import tensorflow as tf

    local = len(strategy.extended.worker_devices)
    workers = strategy.num_replicas_in_sync // local
    out: list[Any] = list(tensors)
    by_dtype: dict[Any, list[int]] = {}
    for index, tensor in enumerate(tensors):
        by_dtype.setdefault(tensor.dtype, []).append(index)
    for dtype, indices in by_dtype.items():
        flat = tf.concat([tf.reshape(tensors[i], [-1]) for i in indices], axis=0)
        scale = tf.cast(1.0 / (local * workers), dtype)
        per_replica = strategy.experimental_distribute_values_from_function(
            lambda context, flat=flat, scale=scale: flat * scale)
        summed = strategy.reduce("SUM", per_replica, axis=None)
        sizes = [tf.size(tensors[i]) for i in indices]
        for i, part in zip(indices, tf.split(summed, tf.stack(sizes), axis=0)):
            out[i] = tf.reshape(part, tf.shape(tensors[i]))
    return out


def average_gradients_over_workers() -> None:
    """`GradientTape.gradient` with respect to distributed variables, outside `strategy.run`:
    the gradients of the local copies, averaged over the workers (see the module's text)."""
    import tensorflow as tf
    from tensorflow.python.eager import backprop

    def wrap(original: Callable) -> Callable:
        def gradient(self, target, sources, output_gradients=None,
                     unconnected_gradients=tf.UnconnectedGradients.NONE):
            strategy = multi_worker_cross_replica()
            flat = tf.nest.flatten(sources)
            distributed = [_distributed_component(source) for source in flat]
            if strategy is None or all(found is None for found in distributed):
                return original(self, target, sources, output_gradients, unconnected_gradients)
            local = [found._get_on_device_or_primary() if found is not None else source
                     for source, found in zip(flat, distributed)]
            grads = list(tf.nest.flatten(original(self, target, local, output_gradients,
                                                  unconnected_gradients)))
            shared = [i for i, (grad, found) in enumerate(zip(grads, distributed))
                      if grad is not None and found is not None]
            averaged = mean_over_workers(strategy, [tf.convert_to_tensor(grads[i])
                                                    for i in shared])
            for i, grad in zip(shared, averaged):
                grads[i] = grad
            notes.averaged = True
            return tf.nest.pack_sequence_as(sources, grads)
        return gradient

    guarded_patches.patch(
        "cross_replica_steps.average_gradients_over_workers",
        "tensorflow GradientTape.gradient",
        lambda: (guarded_patches.method(backprop.GradientTape, "gradient", "target", "sources",
                                        "output_gradients", "unconnected_gradients"),
                 guarded_patches.attribute(_values().DistributedVariable,
                                           "_get_on_device_or_primary")),
        lambda found: _set(backprop.GradientTape, "gradient", wrap),
        risk=_RISK, library="tensorflow")


def watch_local_copies() -> None:
    """`GradientTape.watch` of distributed variables outside `strategy.run` watches their
    local copies (`optimizer.minimize` watches the variables before its loss runs)."""
    import tensorflow as tf
    from tensorflow.python.eager import backprop

    def watch_wrap(original: Callable) -> Callable:
        def watch(self, tensor):
            if multi_worker_cross_replica() is not None:
                flat = tf.nest.flatten(tensor)
                found = [_distributed_component(item) for item in flat]
                tensor = [f._get_on_device_or_primary() if f is not None else item
                          for item, f in zip(flat, found)]
            return original(self, tensor)
        return watch

    guarded_patches.patch(
        "cross_replica_steps.watch_local_copies", "tensorflow GradientTape.watch",
        lambda: guarded_patches.method(backprop.GradientTape, "watch", "tensor"),
        lambda found: _set(backprop.GradientTape, "watch", watch_wrap),
        risk=_RISK, library="tensorflow")


def _values() -> Any:
    from tensorflow.python.distribute import values

    return values


# --- the optimizers' apply ---------------------------------------------------------------


def apply_in_cross_replica_context() -> None:
    """`maybe_merge_call(fn, strategy, ...)` with no replica context calls `fn(strategy, ...)`,
    what `merge_call` would have run: tf-keras' and Keras 3's optimizers apply (and decay)
    through it, and on CPU workers it asked the missing replica context for `merge_call`."""
    import sys

    from tensorflow.python.distribute import distribute_lib, merge_call_interim

    def wrap(original: Callable) -> Callable:
        def maybe_merge_call(fn, strategy, *args, **kwargs):
            if (distribute_lib.get_replica_context() is None
                    and multi_worker_cross_replica() is strategy):
                return fn(strategy, *args, **kwargs)
            return original(fn, strategy, *args, **kwargs)
        return maybe_merge_call

    def apply(original: Callable) -> None:
        _set(merge_call_interim, "maybe_merge_call", wrap)
        replacement = merge_call_interim.maybe_merge_call
        # tf.__internal__.distribute.interim re-exports it, in each API tree (tf, compat.v2).
        for name, module in list(sys.modules.items()):
            if (name.endswith("__internal__.distribute.interim")
                    and getattr(module, "maybe_merge_call", None) is original):
                setattr(module, "maybe_merge_call", replacement)  # noqa: B010

    guarded_patches.patch(
        "cross_replica_steps.apply_in_cross_replica_context",
        "tensorflow merge_call_interim.maybe_merge_call",
        lambda: guarded_patches.method(merge_call_interim, "maybe_merge_call", "fn",
                                       "strategy"),
        apply, risk=_RISK, library="tensorflow")


# --- metrics' state ----------------------------------------------------------------------


def add_to_own_copy() -> None:
    """`assign_add`/`assign_sub` on a sum-aggregated, synchronized-on-read variable (a
    metric's state) outside `strategy.run`: this worker's part goes to its own copy (TF
    raises); a read sums the parts over the workers."""
    values = _values()

    def wrap(original: Callable) -> Callable:
        name = original.__name__

        def assign_change(self, value, *args, **kwargs):
            import tensorflow as tf

            if (self.aggregation == tf.VariableAggregation.SUM
                    and multi_worker_cross_replica() is self.distribute_strategy):
                return getattr(self._get_on_device_or_primary(), name)(value, *args, **kwargs)
            return original(self, value, *args, **kwargs)
        return assign_change

    def lookup() -> Any:
        for name in ("assign_add", "assign_sub"):
            guarded_patches.method(values.SyncOnReadVariable, name, "value")
        return values.SyncOnReadVariable

    guarded_patches.patch(
        "cross_replica_steps.add_to_own_copy",
        "tensorflow SyncOnReadVariable.assign_add/assign_sub", lookup,
        lambda cls: _set_both(cls, wrap),
        risk="a metric updated in a training step written for one process fails on the "
             "workers", library="tensorflow")


def _set_both(cls: Any, wrap: Callable[[Callable], Callable]) -> None:
    for name in ("assign_add", "assign_sub"):
        _set(cls, name, wrap)


# --- losses and Keras variables ------------------------------------------------------------


def tf_keras_default_reduction(tf_keras: Any) -> None:
    """tf-keras: a loss with the AUTO / SUM_OVER_BATCH_SIZE reduction, called outside
    `strategy.run`, averages over the batch it is given (tf-keras raises "Please use
    Reduction.SUM or NONE", advice for code that runs per replica)."""
    def lookup() -> Any:
        from tf_keras.src import losses

        guarded_patches.method(losses.Loss, "_get_reduction")
        return losses

    def wrap(original: Callable) -> Callable:
        def _get_reduction(self):
            if multi_worker_cross_replica() is None:
                return original(self)
            from tf_keras.src.utils import losses_utils

            if self.reduction == losses_utils.ReductionV2.AUTO:
                return losses_utils.ReductionV2.SUM_OVER_BATCH_SIZE
            return self.reduction
        return _get_reduction

    guarded_patches.patch(
        "cross_replica_steps.tf_keras_default_reduction", "tf_keras Loss._get_reduction",
        lookup, lambda losses: _set(losses.Loss, "_get_reduction", wrap),
        risk="a tf-keras loss with the default reduction fails in a training step written "
             "for one process", library="tf_keras")


def tf_keras_apply_as_given(tf_keras: Any) -> None:
    """tf-keras: an optimizer applied outside `strategy.run` applies the gradients as given:
    tape.gradient averaged them over the workers already (its own aggregation asks a replica
    context that does not exist there)."""
    def aggregate(original: Callable) -> Callable:
        def aggregate_gradients(self, grads_and_vars):
            if multi_worker_cross_replica() is None:
                return original(self, grads_and_vars)
            return list(grads_and_vars)   # averaged by tape.gradient already
        return aggregate_gradients

    def optimizer() -> Any:
        from tf_keras.src.optimizers import optimizer as module

        guarded_patches.method(module.Optimizer, "aggregate_gradients", "grads_and_vars")
        return module.Optimizer

    guarded_patches.patch(
        "cross_replica_steps.tf_keras_apply_as_given",
        "tf_keras Optimizer.aggregate_gradients", optimizer,
        lambda cls: _set(cls, "aggregate_gradients", aggregate),
        risk="a tf-keras optimizer applied in a training step written for one process fails "
             "on the workers", library="tf_keras")


def keras3_unscaled_loss(keras: Any) -> None:
    """Keras 3: a loss computed outside `strategy.run` is not divided by the number of
    replicas (`scale_loss_for_distribution`, meant for a per-replica loss that fit sums)."""
    def losses() -> Any:
        from keras.src.losses import loss

        guarded_patches.method(loss, "scale_loss_for_distribution", "value")
        return loss

    def scale(original: Callable) -> Callable:
        def scale_loss_for_distribution(value):
            if multi_worker_cross_replica() is not None:
                return value
            return original(value)
        return scale_loss_for_distribution

    guarded_patches.patch(
        "cross_replica_steps.keras3_unscaled_loss",
        "keras losses.loss.scale_loss_for_distribution", losses,
        lambda module: _set(module, "scale_loss_for_distribution", scale),
        risk="a Keras 3 loss in a training step written for one process is divided by the "
             "number of workers", library="keras")


def keras3_metric_state(keras: Any) -> None:
    """Keras 3: a metric's `assign_add` outside `strategy.run` adds to the worker's own copy
    (Keras reads the variable, which sums every worker's copy, and assigns the sum back: the
    parts would add up again)."""

    def variable() -> Any:
        for name in ("assign_add", "assign_sub"):
            guarded_patches.method(_keras3_variable(), name, "value")
        return _keras3_variable()

    def change(original: Callable) -> Callable:
        name = original.__name__

        def assign_change(self, value):
            inner = getattr(self, "_value", None)
            if (isinstance(inner, _values().SyncOnReadVariable)
                    and multi_worker_cross_replica() is inner.distribute_strategy):
                import tensorflow as tf

                return getattr(inner, name)(tf.cast(value, inner.dtype))
            return original(self, value)
        return assign_change

    guarded_patches.patch(
        "cross_replica_steps.keras3_metric_state", "keras Variable.assign_add/assign_sub",
        variable,
        lambda cls: _set_both(cls, change),
        risk="a Keras 3 metric updated in a training step written for one process counts "
             "every worker's part again", library="keras")


def numbers_from_distributed_variables() -> None:
    """`int(v)` and `float(v)` of a variable made in the strategy's scope, as of any variable:
    TensorFlow's checkpoint guide counts steps with `int(ckpt.step)`, and a distributed
    variable has no `__int__` (measured, TF 2.21: TypeError under any strategy, one process
    too). The value is the variable's read in the current context."""
    values = _values()

    def convert(kind: type) -> Callable:
        def number(self):
            return kind(self.read_value())
        number.__name__ = f"__{kind.__name__}__"
        return number

    def lookup() -> Any:
        owner = values.DistributedVariable
        for name in ("__int__", "__float__"):
            if hasattr(owner, name):
                raise guarded_patches.TargetChanged(f"DistributedVariable has {name} already")
        guarded_patches.method(owner, "read_value")
        return owner

    def apply(owner: Any) -> None:
        owner.__int__ = convert(int)
        owner.__float__ = convert(float)

    guarded_patches.patch(
        "cross_replica_steps.numbers_from_distributed_variables",
        "tensorflow DistributedVariable.__int__/__float__", lookup, apply,
        risk="`int(ckpt.step)` of a variable made in a %%tfdist cell raises TypeError",
        library="tensorflow")


def keras3_mean_writes(keras: Any) -> None:
    """Keras 3: a write outside `strategy.run` to a mean-aggregated variable (BatchNormalization's
    moving mean and variance: keras3_corrections.mean_moving_statistics) is averaged over the
    workers first. Each worker computed the statistics of its own rows, and the write goes to
    its own copy: measured, the moving statistics of a split loop differed between workers."""
    def variable() -> Any:
        guarded_patches.method(_keras3_variable(), "assign", "value")
        return _keras3_variable()

    def wrap(original: Callable) -> Callable:
        def assign(self, value):
            import tensorflow as tf

            inner = getattr(self, "_value", None)
            strategy = multi_worker_cross_replica()
            if (isinstance(inner, _values().MirroredVariable) and strategy is not None
                    and inner.aggregation == tf.VariableAggregation.MEAN
                    and strategy is inner.distribute_strategy):
                value = mean_over_workers(strategy, [tf.cast(value, inner.dtype)])[0]
            return original(self, value)
        return assign

    guarded_patches.patch(
        "cross_replica_steps.keras3_mean_writes", "keras Variable.assign", variable,
        lambda cls: _set(cls, "assign", wrap),
        risk="a Keras 3 BatchNormalization's moving statistics in a training step written for "
             "one process differ between the workers", library="keras")


def _keras3_variable() -> type:
    """Keras 3's TensorFlow Variable class, from where every 3.x exports it (its module moved:
    backend/tensorflow/core.py until 3.15, backend/tensorflow/ops/core.py in 3.16)."""
    from keras.src.backend import tensorflow as backend

    return backend.Variable


def install() -> None:
    """After the strategy exists: the TensorFlow corrections now, Keras' when imported."""
    numbers_from_distributed_variables()
    watch_local_copies()
    average_gradients_over_workers()
    apply_in_cross_replica_context()
    add_to_own_copy()
    when_imported("tf_keras", tf_keras_default_reduction)
    when_imported("tf_keras", tf_keras_apply_as_given)
    when_imported("keras", _keras3_if_three)


def _keras3_if_three(keras: Any) -> None:
    if str(getattr(keras, "__version__", "")).startswith("3."):
        keras3_unscaled_loss(keras)
        keras3_metric_state(keras)
        keras3_mean_writes(keras)
