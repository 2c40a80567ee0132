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

from ...protocol.checkpoints import trackables


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
    return SnapshotTaker().take(model)


class SnapshotTaker:
    """Snapshots of one model, taken again and again (a fit's checkpoints): TensorFlow's
    gathering (the object graph and what each value is read from: 10-15 ms of the
    training thread for a small model on 2 cores, growing with the variables) is done
    once; later snapshots only read, while the model and its optimizer hold the same
    variables. `reused` counts the snapshots that read without gathering."""

    def __init__(self) -> None:
        self._gathered: dict | None = None
        self._variables: list = []
        self.reused = 0

    def take(self, model, checkpoint: Any = None) -> WeightsSnapshot | None:
        """`model`'s values now, as a checkpoint of the model and its optimizer holds
        them, or as `checkpoint` (a `tf.train.Checkpoint` of the model and more: the
        automatic backup's) holds them."""
        try:
            from tensorflow.python.checkpoint.functional_saver import MultiDeviceSaver
            from tensorflow.python.training.saving.saveable_object import SaveSpec
        except ImportError:
            return None
        variables = _variables_of(model)
        gathered: dict | None = self._gathered
        if gathered is not None and _same_objects(variables, self._variables):
            self.reused += 1
        else:
            gathered = _gather(model, checkpoint)
            if gathered is None:
                return None
            rereadable = all(_rereadable(owner, key, value, SaveSpec)
                             for owner, tensors in gathered.items()
                             for key, value in tensors.items())
            self._gathered, self._variables = (gathered, variables) if rereadable else (None, [])
        # Keyed by the objects themselves, in the gathering's kind of mapping (by
        # identity: variables are unhashable), which stays as it was for the next one.
        values = type(gathered)()
        for owner, tensors in gathered.items():
            values[owner] = {key: _read(value, SaveSpec) for key, value in tensors.items()}
        return WeightsSnapshot(values, MultiDeviceSaver)


def _gather(model, checkpoint: Any = None) -> dict | None:
    """What TensorFlow's saver would write for `model` (or `checkpoint`): {owner: {key:
    value}}."""
    import tensorflow as tf

    try:
        if checkpoint is None:   # held here: its saver holds it weakly
            checkpoint = tf.train.Checkpoint(**trackables(model))
        serialized, _feeds, registered_savers, _graph = \
            checkpoint._saver._gather_serialized_tensors(None)
    except (ImportError, AttributeError, TypeError, ValueError):
        return None
    if registered_savers:   # they read their objects when they write: not a snapshot
        return None
    return serialized


# The saver's own entry: the object graph, made once per gathering (a constant).
_OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"


def _rereadable(owner: Any, key: str, value: Any, save_spec: Any) -> bool:
    """Whether reading `value` again gives the value of that moment: a variable, a spec
    that reads when asked, the object graph. A tensor computed at the gathering is not."""
    import tensorflow as tf

    if isinstance(value, dict):
        return all(_rereadable(owner, key, each, save_spec) for each in value.values())
    if isinstance(value, save_spec):
        return callable(getattr(value, "_tensor", None))
    if isinstance(value, tf.Variable):
        return True
    return owner is None and key == _OBJECT_GRAPH_KEY


def _variables_of(model) -> list:
    """The model's and its optimizer's variables: what a checkpoint's object graph holds."""
    found = list(getattr(model, "weights", []))
    optimizer = getattr(model, "optimizer", None)
    held = getattr(optimizer, "variables", ())
    found += list(held() if callable(held) else held)   # a method on legacy optimizers
    return found


def _same_objects(now: list, before: list) -> bool:
    return len(now) == len(before) and all(a is b for a, b in zip(now, before))


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
    if (isinstance(value, tf.Tensor) and not isinstance(value, tf.Variable)
            and value.device.endswith("CPU:0")):
        return value    # a read already, where it is written from: one op less each
    with tf.device("/cpu:0"):
        return tf.identity(value)
