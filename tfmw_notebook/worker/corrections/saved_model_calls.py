"""A loaded SavedModel's functions, called in a %%tfdist cell, run as they do outside a scope.

`%%tfdist` runs every cell inside the shared strategy's scope, so `tf.saved_model.load`
there gives the loaded functions distributed variables. TensorFlow then resolves those
variables by context (tensorflow/python/saved_model/load.py, `_WrapperFunction`): in a
replica (`strategy.run`) each replica's own copy; in the scope's cross-replica context a
placeholder that fails if it is ever run ("Trying to access a placeholder that is not
supposed to be executed ... cross-replica context in an in-replica context"), because it
expects such a graph to be only traced, never run. A cell that calls
`loaded.signatures["serving_default"](x)` or `loaded.serve(x)` runs it, so it always failed
(measured, TF 2.21 with Keras 3 and tf-keras; the same call outside any scope works).

The correction resolves them, in the cross-replica context only, to the first local copy,
which is what TensorFlow reads for the same call outside any scope. It cannot change a
call that worked: replica-context calls are untouched, and TensorFlow traces a function
separately for cross-replica and replica contexts (its trace cache keys on it), so a graph
made here is never run inside a replica. Saving (`is_saving_non_distributed`) keeps
TensorFlow's own path.
"""

from __future__ import annotations

import functools
from typing import Any

from ..common import guarded_patches

_MARK = "_tfmw_saved_model_correction"   # set on the replacement, so it is applied once


def apply() -> bool:
    """Correct the loaded functions' cross-replica calls; False if this TensorFlow has no
    such method (then nothing changes, the cell runner says so, and the error's hint names
    `%%tfdist --no-scope`)."""
    return guarded_patches.patch(
        "saved_model_calls", "tensorflow.python.saved_model.load._WrapperFunction._call_flat",
        _wrapper_class, _resolve_cross_replica_captures, library="tensorflow",
        risk="a loaded SavedModel's signature called in a cell may fail ('Trying to access "
             "a placeholder that is not supposed to be executed'); `%%tfdist --no-scope` "
             "avoids it")


def _wrapper_class() -> Any:
    from tensorflow.python.distribute import distribute_utils, values_util
    from tensorflow.python.saved_model import load as saved_model_load

    # What the replacement calls, checked now rather than at a cell's call.
    guarded_patches.attribute(values_util, "is_saving_non_distributed")
    guarded_patches.attribute(distribute_utils, "is_distributed_variable")
    wrapper_class = guarded_patches.attribute(saved_model_load, "_WrapperFunction")
    guarded_patches.method(wrapper_class, "_call_flat", "args", "captured_inputs")
    return wrapper_class


def _resolve_cross_replica_captures(wrapper_class: Any) -> None:
    original = wrapper_class._call_flat
    if getattr(original, _MARK, False):
        return

    @functools.wraps(original)
    def _call_flat(self, args, captured_inputs):
        if _in_cross_replica_context():
            captured_inputs = [_local_copy(value) for value in captured_inputs]
        return original(self, args, captured_inputs)

    setattr(_call_flat, _MARK, True)
    wrapper_class._call_flat = _call_flat


def _in_cross_replica_context() -> bool:
    import tensorflow as tf
    from tensorflow.python.distribute import values_util

    return (tf.distribute.has_strategy() and tf.distribute.in_cross_replica_context()
            and not values_util.is_saving_non_distributed())


def _local_copy(value):
    """A distributed variable's first local copy's handle (what a call outside any scope
    reads); anything else as it is."""
    from tensorflow.python.distribute import distribute_utils

    if not distribute_utils.is_distributed_variable(value):
        return value
    return value.values[0].handle
