"""A model's checkpoint read now and written later, from any thread.

`take(model)` reads every value a `tf.train.Checkpoint` of the model and its optimizer
would save, on the calling thread: under MultiWorkerMirroredStrategy that is where any
read across workers happens, so every worker takes its snapshot at the same point of
training. `WeightsSnapshot.write(prefix)` writes those values afterwards, in the format
`tf.train.Checkpoint.read` restores. A read value stays as it was while training goes
on: TensorFlow's variables copy their buffer before an update when a read still holds it.

Built on TensorFlow's own saver (the tensors and object graph it gathers, and the saver
that writes them), whose parts are internal: where they are missing, `take` returns None
and the caller writes in place, as `tf.train.Checkpoint.write` does.
"""

from __future__ import annotations

from typing import Any

from ..protocol.checkpoints import trackables


class WeightsSnapshot:
    """The values of one moment, keyed as TensorFlow's saver keys them."""

    def __init__(self, values: dict, saver_class: type):
        self._values = values
        self._saver_class = saver_class

    def write(self, prefix: str) -> None:
        """Write the checkpoint files `prefix`.* (its directory must exist)."""
        import tensorflow as tf

        with tf.device("/cpu:0"):
            prefix_tensor = tf.constant(prefix)
        self._saver_class(self._values).save(prefix_tensor, options=tf.train.CheckpointOptions())


def take(model) -> WeightsSnapshot | None:
    """The checkpoint of `model` (and its optimizer) as it is now; None where this
    TensorFlow lacks the saver's parts, or the model has savers of its own kind."""
    import tensorflow as tf

    try:
        from tensorflow.python.checkpoint.functional_saver import MultiDeviceSaver
        from tensorflow.python.training.saving.saveable_object import SaveSpec

        checkpoint = tf.train.Checkpoint(**trackables(model))   # its saver holds it weakly
        gathered = checkpoint._saver._gather_serialized_tensors(None)
        serialized, _feeds, registered_savers, _graph = gathered
    except (ImportError, AttributeError, TypeError, ValueError):
        return None
    if registered_savers:   # they read their objects when they write: not a snapshot
        return None
    # Keyed by the objects themselves (by identity: variables are unhashable).
    for owner, tensors in serialized.items():
        serialized[owner] = {key: _read(value, SaveSpec) for key, value in tensors.items()}
    return WeightsSnapshot(serialized, MultiDeviceSaver)


def _read(value: Any, save_spec: Any) -> Any:
    """`value` as a tensor read now: the saver accepts tensors, variables, callables
    (reads it would do when it writes) and SaveSpecs wrapping any of them."""
    import tensorflow as tf

    if isinstance(value, dict):   # {slice spec: value} of a partitioned variable
        return {spec: _read(each, save_spec) for spec, each in value.items()}
    if isinstance(value, save_spec):
        tensor = _on_cpu(value.tensor)   # a callable spec reads here
        if value.name is None:           # a callable spec: the saver names it by its key
            return tensor
        return save_spec(tensor, value.slice_spec, value.name, dtype=value.dtype,
                         device=value.device)
    if isinstance(value, tf.Tensor) and not isinstance(value, tf.Variable):
        return value
    return _on_cpu(value)


def _on_cpu(value: Any) -> Any:
    import tensorflow as tf

    if value is None:   # an uninitialized variable: the saver skips it
        return None
    with tf.device("/cpu:0"):
        return tf.identity(value)
