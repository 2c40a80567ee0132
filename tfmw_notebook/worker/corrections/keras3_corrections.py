"""Corrections that let Keras 3 (TensorFlow backend) train under MultiWorkerMirroredStrategy.

Keras 3 does not support MWMS upstream (keras-team/keras#20585, tensorflow/tensorflow#72388):
on 2 workers `fit`, `evaluate` and `train_on_batch` fail, mixed precision can hang,
BatchNormalization's moving statistics drift apart, and neither a metric whose result is its
state variable nor a model with no `call()` (keras.io's GAN) can fit, nor a layer drawing
`keras.random` noise with no seed (keras.io's VAE). Each function below
patches one Keras internal (two may wrap the same one, each once), in the worker process
only, and is named after what it makes true; its docstring names the upstream issue.
`apply()` applies them all, once, after the strategy exists. Each looks its target up and
checks its parameters through guarded_patches.py: a target missing or changed in another
Keras is skipped, and the cell runner says which and what may then fail; `import keras`
goes on.

Invariant: a correction changes what Keras does only under a strategy in multi-worker mode
(Keras' own test, `_collective_all_reduce_multi_worker`); with no strategy, the default
strategy, MirroredStrategy or a one-worker MWMS, Keras runs its own code. Each was measured
on 2 workers to be needed (a scenario fails without it) and, with the others, sufficient:
weights identical on both workers, and equal to one process on the global batch (measured
with 2 plain processes and TF_CONFIG; on real workers: tests/test_keras3.py).

Standard library only at import time; Keras is imported by `apply()`, TensorFlow by a
correction whose target was found.
"""

from __future__ import annotations

import functools
import importlib
import re
import warnings
from collections.abc import Callable
from typing import Any

from ...protocol.warning import TFDistWarning
from ..common import guarded_patches, package_versions

# Keras versions the corrections were verified on (2 workers, TF 2.21, CPU): 3.10.0, 3.13.2
# and 3.15.1. The internals they patch read the same in all three (3.11, 3.12, 3.14 not run);
# read_variables_in_logs and defer_build_without_call: tests/test_keras3_custom.py passed on
# 3.13.2 and 3.15.1; on 3.10.0 the GAN trains but a metric returning its state variable
# still fails on the workers ("object __array__ method not producing an array").
# share_global_seed_generator was run on 3.15.1 only. keras-nightly 3.16.0.dev2026102704
# with tf-nightly 2.23.0.dev20261026: tests/test_keras3.py passed (docs/installing.md).
VERIFIED_KERAS: tuple[str, str] = (">=3.10", "<3.17")

_MARK = "_tfmw_keras3_correction"   # set on every replacement, so nothing is patched twice
_applied: list[str] | None = None   # the names apply() put in place, once it has run


def describe_keras() -> str:
    """E.g. "Keras 3.15.1" (the imported module's version, else the installed one)."""
    version = _keras_version()
    return f"Keras {version}" if version else "Keras not installed"


def _keras_version() -> str | None:
    return package_versions.version("keras")


def parse_version(text: str) -> tuple[int, ...]:
    """The numeric release at the start of a version: "3.16.0.dev2025" -> (3, 16, 0)."""
    match = re.match(r"\s*v?(\d+(?:\.\d+)*)", text)
    if not match:
        raise ValueError(f"Invalid value for argument `text`. Received: text={text!r}. "
                         "Expected a version such as '3.15.1'.")
    return tuple(int(part) for part in match.group(1).split("."))


_COMPARE: dict[str, Callable[[tuple[int, ...], tuple[int, ...]], bool]] = {
    ">=": lambda a, b: a >= b, ">": lambda a, b: a > b, "<=": lambda a, b: a <= b,
    "<": lambda a, b: a < b, "==": lambda a, b: a == b, "!=": lambda a, b: a != b}


def in_range(version: str, bounds: tuple[str, ...] = VERIFIED_KERAS) -> bool:
    """Whether `version` meets every bound (">=3.10", "<3.16", ...); "3.16" means 3.16.0."""
    have = parse_version(version)
    for bound in bounds:
        match = re.fullmatch(r"\s*(>=|<=|==|!=|>|<)\s*(\S+)\s*", bound)
        if not match:
            raise ValueError(f"Invalid value for argument `bounds`. Received: {bound!r}. "
                             "Expected an operator (>=, <, ==, ...) and a version.")
        want = parse_version(match.group(2))
        width = max(len(have), len(want))
        padded = have + (0,) * (width - len(have)), want + (0,) * (width - len(want))
        if not _COMPARE[match.group(1)](*padded):
            return False
    return True


def range_warning(version: str | None) -> str | None:
    """The one line `apply()` warns with when `version` is outside VERIFIED_KERAS."""
    if version is None or in_range(version):
        return None
    return (f"Keras {version} is not among the versions tfmw_notebook's Keras 3 corrections "
            f"for multi-worker training were verified on ({', '.join(VERIFIED_KERAS)}); "
            "they are applied anyway. If fit fails or hangs on the workers, use tf-keras.")


# --- the corrections ----------------------------------------------------------------------


_TRAINER = "keras.src.backend.tensorflow.trainer"
_TRAINER_CLASS = f"{_TRAINER}.TensorFlowTrainer (Trainer from Keras 3.16)"
_REDUCE_PARAMETERS = ("values", "strategy", "reduction")


def _trainer_module() -> Any:
    from keras.src.backend.tensorflow import trainer

    return trainer


def trainer_class() -> Any:
    """Keras' TensorFlow trainer class: `TensorFlowTrainer` up to Keras 3.15, `Trainer` in
    3.16 (DESIGN fact 30); TargetChanged when neither is there."""
    module = _trainer_module()
    for name in ("TensorFlowTrainer", "Trainer"):
        found = module.__dict__.get(name)
        if isinstance(found, type):
            return found
    raise guarded_patches.TargetChanged(f"{_TRAINER} has no TensorFlowTrainer nor Trainer")


def _keras(module: str, *names: str) -> Any:
    """`keras.src.<module>.<names...>`, an AttributeError naming the missing one."""
    found = importlib.import_module(f"keras.src.{module}")
    for name in names:
        found = guarded_patches.attribute(found, name)
    return found


def _multi_worker(strategy: Any) -> bool:
    return strategy is not None and _trainer_module()._collective_all_reduce_multi_worker(
        strategy)


def corrections_on(function: Any) -> list[str]:
    """The corrections wrapped around `function`, outermost first ([] for Keras' own)."""
    names = []
    while getattr(function, _MARK, None):
        names.append(getattr(function, _MARK))
        function = function.__wrapped__
    return names


def _replace(owner: Callable[[], Any], name: str, correction: str, wrap: Callable[[Any], Any],
             *, where: str, parameters: tuple[str, ...] = (), risk: str) -> bool:
    """Set `owner().name` to `wrap(original)`, unless this correction already wraps it (two
    corrections may wrap one internal, each once). Skipped and recorded (guarded_patches.py)
    when the owner or its `name` is missing, or `name` no longer takes the `parameters` the
    replacement passes on: False then, else True. `where` names the owner in the report,
    `risk` says what may fail without the correction."""
    def lookup() -> tuple[Any, Any]:
        # Every replacement asks Keras whether the strategy is multi-worker.
        guarded_patches.attribute(_trainer_module(), "_collective_all_reduce_multi_worker")
        found = owner()
        return found, guarded_patches.method(found, name, *parameters)

    def apply(found: tuple[Any, Any]) -> None:
        target, original = found
        if correction in corrections_on(original):
            return
        replacement = functools.wraps(original)(wrap(original))
        setattr(replacement, _MARK, correction)
        setattr(target, name, replacement)

    return guarded_patches.patch(f"keras3_corrections.{correction}", f"{where}.{name}",
                                 lookup, apply, risk=risk, library="keras")


def build_from_local_batch() -> bool:
    """keras-team/keras#20585, #20329 (dict inputs): build the model from this worker's batch.

    `TensorFlowTrainer._maybe_symbolic_build` (fit, evaluate) averages the first *data batch*
    across replicas, `strategy.reduce("MEAN", batch, axis=None)`, only to learn the inputs'
    shapes. MWMS reduces one tensor, not an (x, y) or dict structure: measured, `ValueError:
    Attempt to convert a value (PerReplica:{...}) ... to a Tensor`. The local replica's batch
    has the same structure, shapes and dtypes, and needs no collective.
    """
    def wrap(original: Callable) -> Callable:
        import tensorflow as tf

        tree = _keras("tree")

        def local(value: Any, strategy: Any) -> Any:
            if isinstance(value, tf.distribute.DistributedValues):
                return strategy.experimental_local_results(value)[0]
            return value

        def _maybe_symbolic_build(self, iterator=None, data_batch=None):
            strategy = self._distribute_strategy
            if iterator is not None and _multi_worker(strategy):
                # As Keras does, the first batch only. The epoch iterator yields
                # (step, iterator) in Keras 3.10, (begin, end, iterator) in 3.13 and 3.15.
                for *_, batches in iterator:
                    batch = next(batches)
                    data_batch = tree.map_structure(lambda v: local(v, strategy), batch)
                    break
                iterator = None
            return original(self, iterator=iterator, data_batch=data_batch)
        return _maybe_symbolic_build

    return _replace(trainer_class, "_maybe_symbolic_build", "build_from_local_batch", wrap,
                    where=_TRAINER_CLASS, parameters=("iterator", "data_batch"),
                    risk="Keras 3 fit and evaluate may fail on the workers with "
                         "'Attempt to convert a value (PerReplica...)'")


def mean_logs_across_workers() -> bool:
    """keras-team/keras#20585, tensorflow/tensorflow#72388: average step logs with axis=None.

    `reduce_per_replica(..., "auto" or "mean")` reduces each log a train or test step returns
    with `strategy.reduce("MEAN", v, axis=0)` in multi-worker mode. The logs are scalars (each
    metric's result on its replica), which have no axis 0: measured, `ValueError: Invalid
    reduction dimension 0 for input with 0 dimensions` (after build_from_local_batch; and in
    train_on_batch, which does not build). axis=None is the element-wise mean over replicas,
    what tf-keras does and Keras does on one worker. "concat" (predict) and "sum" are kept.
    """
    def wrap(original: Callable) -> Callable:
        tree = _keras("tree")

        def reduce_per_replica(values, strategy, reduction):
            if reduction in ("auto", "mean") and _multi_worker(strategy):
                return tree.map_structure(
                    lambda v: strategy.reduce("MEAN", v, axis=None), values)
            return original(values, strategy, reduction)
        return reduce_per_replica

    return _replace(_trainer_module, "reduce_per_replica", "mean_logs_across_workers", wrap,
                    where=_TRAINER, parameters=_REDUCE_PARAMETERS,
                    risk="Keras 3 fit, evaluate and train_on_batch may fail on the workers "
                         "with 'Invalid reduction dimension 0'")


def read_variables_in_logs() -> bool:
    """keras-team/keras#20585 (no issue of its own found): a step log that is a variable is
    logged by value, its aggregate over every replica.

    A metric whose `result()` returns its state variable (keras.io's
    `CategoricalTruePositives` returns `self.true_positives`, made by `add_variable`: sum
    aggregation, synchronized on read) puts a Keras Variable into the logs. In multi-worker
    mode `reduce_per_replica` hands every log to `strategy.reduce`, which needs a tensor with
    a device: measured, `ValueError: Cannot convert input_tensor to a PerReplica object
    because it doesn't have device set` in fit and evaluate. With one worker Keras passes it
    on and reads it later, in cross-replica context, where it is the sum over replicas: what
    one process counts on the global batch. Here it is read so inside the step function,
    where every worker runs that collective at the same point (a callback on one worker
    reading it later would wait alone). Other logs go on to Keras (or the next correction).
    """
    def wrap(original: Callable) -> Callable:
        import tensorflow as tf

        tree, variable = _keras("tree"), _keras("backend", "Variable")

        def read(value: Any, strategy: Any) -> Any:
            with strategy.scope():
                return tf.convert_to_tensor(value)

        def reduce_per_replica(values, strategy, reduction):
            if not _multi_worker(strategy):
                return original(values, strategy, reduction)
            return tree.map_structure(
                lambda v: read(v, strategy) if isinstance(v, (variable, tf.Variable))
                else original(v, strategy, reduction), values)
        return reduce_per_replica

    return _replace(_trainer_module, "reduce_per_replica", "read_variables_in_logs", wrap,
                    where=_TRAINER, parameters=_REDUCE_PARAMETERS,
                    risk="a Keras 3 metric whose result is its state variable may fail on "
                         "the workers ('doesn't have device set')")


def defer_build_without_call() -> bool:
    """keras-team/keras#20585 (no issue of its own found): a model with no `call()` of its
    own, trained by its `train_step` (keras.io's GAN), is built when its step is traced.

    Under any strategy `fit` first builds the model symbolically, running `call()` on
    placeholders (`Trainer._symbolic_build`); `Model.call` raises NotImplementedError,
    measured: `RuntimeError: Unable to automatically build the model`. With no strategy
    Keras skips that build and the variables are made when the step is traced; here a
    model without `call` takes that path in multi-worker mode too. Its sub-models (the
    generator and discriminator) are built already; the optimizers build in the step.
    """
    def wrap(original: Callable) -> Callable:
        model_call = _keras("models.model", "Model", "call")

        def _symbolic_build(self, iterator=None, data_batch=None):
            if (type(self).call is model_call
                    and _multi_worker(getattr(self, "_distribute_strategy", None))):
                return None
            return original(self, iterator=iterator, data_batch=data_batch)
        return _symbolic_build

    return _replace(trainer_class, "_symbolic_build", "defer_build_without_call", wrap,
                    where=_TRAINER_CLASS, parameters=("iterator", "data_batch"),
                    risk="a Keras 3 model with no call() (keras.io's GAN) may fail to fit on "
                         "the workers ('Unable to automatically build the model')")


def agree_on_finite_grads() -> bool:
    """keras-team/keras#18666 (its fix, #18691, assumes one process): every worker skips or
    applies the same loss-scaled step.

    `LossScaleOptimizer` (mixed_float16) checks that the gradients are finite *before* the
    inner optimizer all-reduces them, and applies the step (with that all-reduce) only if
    they are. Keras takes the first local replica's answer, "the same on every replica since
    grads are all-reduced"; across workers it is not: measured, at the initial scale 2**15
    the workers disagreed and the one applying waited in the all-reduce until killed. Now a
    step counts as finite only if it is finite on every replica (one more scalar all-reduce).
    """
    def wrap(original: Callable) -> Callable:
        import tensorflow as tf

        def check_finite(self, grads):
            finite = original(self, grads)
            replica = tf.distribute.get_replica_context()
            if replica is None or not _multi_worker(tf.distribute.get_strategy()):
                return finite
            not_finite = tf.cast(tf.logical_not(finite), tf.float32)
            return tf.equal(replica.all_reduce("SUM", not_finite), 0.0)
        return check_finite

    return _replace(lambda: _keras("optimizers.loss_scale_optimizer", "LossScaleOptimizer"),
                    "check_finite", "agree_on_finite_grads", wrap,
                    where="keras.src.optimizers.loss_scale_optimizer.LossScaleOptimizer",
                    parameters=("grads",),
                    risk="Keras 3 mixed precision may hang the workers (they disagree on "
                         "whether a step's gradients are finite)")


def mean_moving_statistics() -> bool:
    """keras-team/keras#20585 (no issue of its own found): BatchNormalization's moving mean
    and variance stay the same on every worker.

    Keras 3 creates them with aggregation "none": each worker updates its own copy from its
    own shard, so after `fit` they differ between workers (measured), and what a worker saves
    or evaluates with depends on its rank. tf-keras averages them over replicas when read;
    here each update is averaged over replicas when written (aggregation "mean"), so reading
    them stays local, with no collective. Layers with `synchronized=True` already agree.
    """
    moving = {"moving_mean", "moving_variance", "moving_stddev", "renorm_mean",
              "renorm_stddev"}

    def wrap(original: Callable) -> Callable:
        import tensorflow as tf

        def add_weight(self, *args, **kwargs):
            if (kwargs.get("name") in moving and not kwargs.get("trainable", True)
                    and kwargs.get("aggregation", "none") == "none"
                    and not getattr(self, "synchronized", False)
                    and _multi_worker(tf.distribute.get_strategy())):
                kwargs["aggregation"] = "mean"
            return original(self, *args, **kwargs)
        return add_weight

    return _replace(
        lambda: _keras("layers.normalization.batch_normalization", "BatchNormalization"),
        "add_weight", "mean_moving_statistics", wrap,
        where="keras.src.layers.normalization.batch_normalization.BatchNormalization",
        parameters=("name", "trainable", "aggregation"),
        risk="Keras 3 BatchNormalization's moving mean and variance may differ between "
             "the workers")


def share_global_seed_generator() -> bool:
    """keras-team/keras#20611 is the nearest (a layer's own SeedGenerator under a strategy);
    no issue found for the global one: an unseeded `keras.random` draw works in a step.

    Keras keeps its global SeedGenerator (what `keras.random.normal(shape)` with no `seed`
    draws from) in thread-local state, and tf.distribute runs each replica's step in a thread
    of its own, a new one on every trace. The first trace makes a generator (a variable) in
    its thread; the next trace, in a new thread, finds none and makes another: measured,
    `ValueError: tf.function only supports singleton tf.Variables created on the first call`
    in fit (keras.io's VAE `Sampling` layer), with one worker too. Here a replica's thread
    uses one generator per process, made on the first trace: its state is a mirrored
    variable, initialized from the chief and advanced alike on every worker. Each draw folds
    in the replica's number, so replicas draw different noise for their different samples,
    as one process does across the samples of the global batch; weights stay identical.
    """
    shared: list[Any] = []   # the process's generator, once a replica has drawn

    def wrap(original: Callable) -> Callable:
        import tensorflow as tf

        replica_generator = _replica_seed_generator()

        def global_seed_generator():
            if (tf.distribute.in_cross_replica_context()
                    or not _multi_worker(tf.distribute.get_strategy())):
                return original()
            if not shared:
                with tf.init_scope():
                    shared.append(replica_generator(name="global_seed_generator"))
            return shared[0]
        return global_seed_generator

    return _replace(lambda: _keras("random.seed_generator"), "global_seed_generator",
                    "share_global_seed_generator", wrap,
                    where="keras.src.random.seed_generator",
                    risk="an unseeded keras.random draw in a Keras 3 step may fail on the "
                         "workers ('tf.function only supports singleton tf.Variables')")


def _replica_seed_generator() -> type:
    """Keras' SeedGenerator whose draws in a replica fold in the replica's number."""
    import tensorflow as tf

    generator: Any = _keras("random.seed_generator", "SeedGenerator")
    guarded_patches.method(generator, "next", "ordered")

    class ReplicaSeedGenerator(generator):
        """One state for every replica; each replica draws its own seed from it."""

        def next(self, ordered=True):
            seed = super().next(ordered=ordered)
            replica = tf.distribute.get_replica_context()
            if replica is None:
                return seed
            return tf.random.experimental.stateless_fold_in(
                seed, replica.replica_id_in_sync_group)

    return ReplicaSeedGenerator


CORRECTIONS: dict[str, Callable[[], bool]] = {
    "build_from_local_batch": build_from_local_batch,
    "mean_logs_across_workers": mean_logs_across_workers,
    "read_variables_in_logs": read_variables_in_logs,   # after, so it wraps the one above
    "defer_build_without_call": defer_build_without_call,
    "agree_on_finite_grads": agree_on_finite_grads,
    "mean_moving_statistics": mean_moving_statistics,
    "share_global_seed_generator": share_global_seed_generator,
}


def _tensorflow_backend() -> bool:
    import keras

    return keras.backend.backend() == "tensorflow"


def _apply_one(name: str, correction: Callable[[], bool]) -> bool:
    """Each correction guards its own target; this catches what its own code raises."""
    applied: list[bool] = []
    guarded_patches.patch(f"keras3_corrections.{name}", "keras", lambda: correction,
                          lambda found: applied.append(found()), library="keras",
                          risk="what it corrects (keras3_corrections.py) may fail")
    return bool(applied and applied[0])


def apply() -> list[str]:
    """Apply every correction once; return the names of those applied (the same list on
    every call): one whose target is missing or changed is skipped (guarded_patches.py).

    Outside VERIFIED_KERAS it still applies them, after one `warnings.warn` line (category
    TFDistWarning) naming the range; later calls warn no more. With no Keras 3, or another
    backend than TensorFlow, there is nothing to correct: [].
    """
    global _applied
    if _applied is not None:
        return list(_applied)
    version = _keras_version()
    if version is None or parse_version(version)[0] != 3 or not _tensorflow_backend():
        _applied = []
        return []
    message = range_warning(version)
    if message:
        warnings.warn(message, TFDistWarning, stacklevel=2)
    _applied = [name for name, correction in CORRECTIONS.items() if _apply_one(name, correction)]
    return list(_applied)
