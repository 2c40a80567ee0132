"""What a fit() ended with, kept so a replay can give it back without training.

After every fit in a %%tfdist cell each worker records the History and where
the model and optimizer state of that moment can be read again: the automatic
checkpoint of the last epoch when one was written (and no retention policy
may delete it), else a snapshot of its own under the session's state
directory. When fresh workers replay the cell, the same fit call restores that
state and returns the History instead of running epochs, and draws from its inputs'
shuffle seeds what the fit drew (input_orders.py; the counts ride in the record's
params, the one field of its own the cluster's FitRecord keeps, and leave it on replay).
"""

from __future__ import annotations

import os
from typing import Any

from ...protocol import checkpoints
from ...protocol.checkpoints import trackables
from ...protocol.run_options import CheckpointPolicy
from ..corrections import keras_flavour
from ..writes import background_writes, chief_writes, weights_snapshot
from . import input_orders

SNAPSHOT = checkpoints.WEIGHTS  # a snapshot directory is laid out like a checkpoint's


def record_after_fit(model, history, *, state_dir: str, cell_id: str, index: int, rank: int,
                     policy: CheckpointPolicy | None,
                     last_saved_epoch: int | None) -> dict[str, Any]:
    """Where the state this fit ended with can be read again, and its History."""
    epochs = [int(e) for e in getattr(history, "epoch", [])]
    record: dict[str, Any] = {
        "history": {key: [float(v) for v in values]
                    for key, values in getattr(history, "history", {}).items()},
        "params": dict(getattr(history, "params", {}) or {}),
        "epoch": epochs,
        "source": None,
        "path": None,
    }
    counts = input_orders.last_counts()
    if counts:   # what drew from its inputs' shuffle seeds: a replay draws it again
        record["params"][input_orders.KEY] = counts
    final_epoch = epochs[-1] + 1 if epochs else None
    if (policy is not None and not policy.prunes and final_epoch is not None
            and last_saved_epoch == final_epoch):
        # The chief commits it before the cell ends (background_writes.py); a replay of
        # the cell, on any rank, reads it.
        record["source"] = "checkpoint"
        record["path"] = os.path.join(policy.run_dir, checkpoints.checkpoint_name(final_epoch))
        return record
    path = os.path.join(state_dir, f"{cell_id}-fit-{index}", f"rank-{rank}")
    os.makedirs(path, exist_ok=True)
    _write_snapshot(model, os.path.join(path, SNAPSHOT))
    record["source"] = "snapshot"
    record["path"] = path
    return record


def _write_snapshot(model, prefix: str) -> None:
    """Read now, written by the writer thread while the cell goes on: the cell ends once
    it is written (background_writes.py), and only a cell that ended is replayed."""
    snapshot = weights_snapshot.take(model)

    def write() -> None:
        with chief_writes.as_named():   # one snapshot per rank: its own path already
            if snapshot is None:
                import tensorflow as tf

                tf.train.Checkpoint(**trackables(model)).write(prefix)
            else:
                snapshot.write(prefix)

    if snapshot is None:   # this TensorFlow cannot snapshot: written in place
        write()
    else:
        background_writes.hand_over(write)


def failed_fit_record() -> dict[str, Any]:
    """A fit that raised (inside a try of the user's): replayed as it is."""
    return {"history": {}, "params": {}, "epoch": [], "source": None, "path": None}


def replay_fit(model, record: dict[str, Any], *, rank: int,
               inputs: dict[str, Any] | None = None):
    """Give `model` the state its fit ended with, and its `inputs` (the replayed call's
    `x`, `validation_data`) the shuffle orders it drew; return that fit's History."""
    import tensorflow as tf

    params = dict(record["params"])
    counts = params.pop(input_orders.KEY, None)
    if counts:
        input_orders.give_back(inputs or {}, counts)
    path = _readable_path(record, rank)
    _build_optimizer(model)
    with chief_writes.as_named():
        status = tf.train.Checkpoint(**trackables(model)).read(os.path.join(path, SNAPSHOT))
    status.expect_partial()  # a model built lazily restores when it is first called
    history = keras_flavour.keras_package(model).callbacks.History()
    history.set_model(model)
    history.history = {key: list(values) for key, values in record["history"].items()}
    history.params = params
    history.epoch = list(record["epoch"])
    model.history = history
    return history


def _readable_path(record: dict[str, Any], rank: int) -> str:
    """This rank's snapshot, else another rank's (identical weights under MWMS)."""
    paths = record["paths"] if "paths" in record else [record["path"]]
    own = paths[rank] if rank < len(paths) else None
    for path in [own] + [p for p in paths if p != own]:
        if path and os.path.isdir(path):
            return path
    raise FileNotFoundError(
        f"the state this fit ended with is gone ({own or paths[0]}): it was deleted after "
        "the cell ran; run the cell again to train it")


def _build_optimizer(model) -> None:
    """Create the optimizer's slots now, so its whole state restores at once."""
    optimizer = getattr(model, "optimizer", None)
    if optimizer is None or not getattr(model, "built", False):
        return
    # Keras 3's and tf-keras' optimizers build their slots from a variable list; tf-keras'
    # legacy ones restore theirs when first created (TensorFlow's deferred restoration).
    if keras_flavour.keras_of(model) == 3:
        if not optimizer.built:
            optimizer.build(model.trainable_variables)
    elif hasattr(optimizer, "_build_index_dict") and not getattr(optimizer, "_built", False):
        optimizer.build(model.trainable_variables)
