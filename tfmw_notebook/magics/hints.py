"""One more line under a worker's error, when the notebook knows the fix. Pure."""

from __future__ import annotations

import re
import types
from typing import Any

_UNDEFINED = re.compile(r"name '([A-Za-z_][A-Za-z0-9_]*)' is not defined")
_NOT_SHARED = re.compile(r"workers ([\d, ]+) do not see")
# What a socket says when it has no way out (no route, no name server).
_NO_WAY_OUT = re.compile(r"Network is unreachable|Temporary failure in name resolution|"
                         r"Name or service not known|No address associated with hostname|"
                         r"Could not resolve host|\[Errno (101|-2|-3|-5)\]")


def missing_name_hint(error_name: str, error_value: str, notebook: dict[str, Any]) -> str | None:
    """For `NameError: name 'x' is not defined` on the workers when the notebook has `x`."""
    if error_name != "NameError":
        return None
    found = _UNDEFINED.search(error_value or "")
    if not found or found.group(1) not in notebook:
        return None
    name = found.group(1)
    value = notebook[name]
    if isinstance(value, types.ModuleType):
        module = value.__name__
        line = f"import {module}" if module == name else f"import {module} as {name}"
        return (f"`{name}` is defined in this notebook but not on the workers: add "
                f"`{line}` to a %%tfdist cell")
    return (f"`{name}` is defined in this notebook but not on the workers: `import` it in a "
            f"%%tfdist cell, or pass `--push {name}`")


def unshared_hosts_hint(error_name: str, error_value: str, hosts: list[str]) -> str | None:
    """For a run directory some workers do not see: the hosts those workers run on
    (`hosts`: index = rank)."""
    if error_name != "RunDirNotShared":
        return None
    found = _NOT_SHARED.search(error_value or "")
    if not found:
        return None
    ranks = [int(r) for r in found.group(1).split(",") if r.strip().isdigit()]
    where = sorted({hosts[r] for r in ranks if 0 <= r < len(hosts)})
    if not where:
        return None
    return (f"on {', '.join(where)} that directory is missing or is another disk: mount the "
            f"chief's ({hosts[0]}) checkpoint storage there at the same path")


def private_network_hint(error_value: str, private: bool) -> str | None:
    """For a worker that could not reach the network because `%tfdist start` gave the
    workers a private network (a download, a cloud bucket)."""
    if not private or not _NO_WAY_OUT.search(error_value or ""):
        return None
    return ("the workers run in a private network with no way out (it keeps their TensorFlow "
            "ports off the network): fetch data in the notebook first (the workers read the "
            "same disk, e.g. ~/.keras/datasets) and read it from there, or `%tfdist stop` and "
            "`%tfdist start --no-isolation`")


# What TensorFlow says when a loaded SavedModel's signature (or a function traced
# outside the strategy) is called inside the strategy's scope (measured, TF 2.21). The
# workers correct the common case (worker/corrections/saved_model_calls.py); a TensorFlow without
# the class that correction needs still raises it.
_NEEDS_NO_SCOPE = re.compile(r"Trying to access a placeholder that is not supposed to be "
                             r"executed|cross-replica context in an in-replica context")


def no_scope_hint(error_value: str) -> str | None:
    """For code that cannot run inside the strategy's scope, which %%tfdist enters."""
    if not _NEEDS_NO_SCOPE.search(error_value or ""):
        return None
    return ("this code cannot run inside the strategy's scope (which %%tfdist enters for "
            "every cell): run the cell with `%%tfdist --no-scope`")


# What TensorFlow and Keras raise for a training step written for one process when the
# workers could not correct it (worker/corrections/cross_replica_steps.py corrects the common
# steps): tf-keras' legacy optimizers refuse to apply outside `strategy.run`; the others are raised
# where a correction was skipped (a TensorFlow or Keras it does not know) or a step touches
# the distributed variables another way. Measured on 2 workers, TF 2.21.
_OUTSIDE_REPLICA = re.compile(
    r"cannot be called in cross-replica context|DistributedVariable\.handle is not available "
    r"outside the replica context|'NoneType' object has no attribute 'merge_call'|"
    r"SyncOnReadVariable does not support `assign_(add|sub)` in cross-replica context")
_LEGACY_APPLY = "apply_gradients() cannot be called in cross-replica context"


def cross_replica_step_hint(error_value: str) -> str | None:
    """For a training step run outside `strategy.run` that the workers could not make run."""
    if not _OUTSIDE_REPLICA.search(error_value or ""):
        return None
    if _LEGACY_APPLY in (error_value or ""):
        return ("this step applies a tf.keras.optimizers.legacy optimizer outside "
                "strategy.run, which the workers cannot correct: use the optimizer without "
                "`.legacy` (e.g. tf.keras.optimizers.Adam), or call the step with "
                "`strategy.run(train_step, args=(...))` (docs: Custom training loops on N "
                "workers)")
    return ("this step uses the strategy's variables outside strategy.run in a way the "
            "workers do not correct: call the step with `strategy.run(train_step, "
            "args=(...))` and reduce its loss with `strategy.reduce` (docs: Custom training "
            "loops on N workers)")


# Keras-2 code (tf.keras before TensorFlow 2.16) run where tf.keras is Keras 3: what Keras 3
# says, by exception type and a pattern searched in the message. Observed messages (Keras
# 3.15.1, TF 2.21, one process) are in tests/test_keras3_corrections_unit.py.
_KERAS2_CODE: tuple[tuple[str, str], ...] = (
    ("AttributeError", r"has no attribute '(reset_states|save_spec)'$"),
    # e.g. tf.keras.losses.mean_squared_error: Keras 3's tf.keras lacks many Keras 2 names
    ("AttributeError", r"^module 'keras\._tf_keras\.keras(\.\w+)*' has no attribute "),
    ("ImportError", r"`keras\.optimizers\.legacy` is not supported in Keras 3"),
    ("ValueError", r"^Invalid filepath extension for saving\. Please add either a `\.keras`"),
    ("ValueError", r"^File format not supported: filepath=.*Keras 3 only supports"),
    ("ValueError", r"^The `save_format` argument is deprecated in Keras 3"),
    ("ValueError", r"^The filename must end in `\.weights\.h5`"),
)


def keras2_code_hint(exc_type_name: str, message: str, workers_keras: int) -> str | None:
    """For code written for Keras 2 that fails because the workers' tf.keras is Keras 3
    (`workers_keras`, 3 or 2: `%tfdist start --keras`); None for any other error."""
    short = exc_type_name.rsplit(".", 1)[-1]
    if workers_keras != 3 or not any(
            short == type_name and re.search(pattern, message or "", re.DOTALL)
            for type_name, pattern in _KERAS2_CODE):
        return None
    return ("This is Keras 2 code (tf.keras before TensorFlow 2.16) and the workers' tf.keras "
            "is Keras 3: `%tfdist restart --keras 2` gives them tf-keras and replays the "
            "earlier cells.")


# Errors that mixing the two Kerases (or Keras 3 without the workers' corrections) raises.
_MIXED = ("This cell mixes Keras 3 (`import keras`) with tf-keras (`tf.keras` when "
          "TF_USE_LEGACY_KERAS=1): take the model, layers, optimizer and callbacks from one.")
# (exception type, pattern searched in the message, hint); observed messages, Keras 3.15.1
# and tf-keras 2.21, are in tests/test_keras3_corrections_unit.py
_HINTS: tuple[tuple[str, str, str], ...] = (
    ("ValueError", r"Could not interpret optimizer identifier: <(tf_keras|keras)\.src\.",
     _MIXED),
    ("ValueError", r"Only instances of `keras\.Layer` can be added .*<tf_keras\.", _MIXED),
    ("TypeError", r"The added layer must be an instance of class Layer\..*'keras\.src\.",
     _MIXED),
    ("AttributeError", r"^'tuple' object has no attribute 'rank'$", _MIXED),
    ("AttributeError", r"^'Variable' object has no attribute '_unique_id'$", _MIXED),
    ("AttributeError", r"has no attribute '_implements_(train|test|predict)_batch_hooks'",
     _MIXED),
    ("TypeError", r"Unrecognized keyword arguments: \['batch_shape'\]",
     "This file was saved by Keras 3, which tf-keras cannot read: load it with "
     "keras.saving.load_model (`tf.keras` is tf-keras when TF_USE_LEGACY_KERAS=1)."),
    ("ValueError", r"Attempt to convert a value \(.*PerReplica",
     "Keras 3 cannot train under MultiWorkerMirroredStrategy without tfmw_notebook's Keras 3 "
     "corrections (keras-team/keras#20585), not applied on this worker: apply them, or use "
     "tf-keras."),
    ("ValueError", r"Invalid reduction dimension 0 for input with 0 dimensions.*div_no_nan",
     "Keras 3 cannot train under MultiWorkerMirroredStrategy without tfmw_notebook's Keras 3 "
     "corrections (keras-team/keras#20585), not applied on this worker: apply them, or use "
     "tf-keras."),
    ("InvalidArgumentError", r"You must feed a value for placeholder tensor.*multi_step_on_",
     "Keras 3 cannot run steps_per_execution > 1 under MultiWorkerMirroredStrategy "
     "(collectives inside its tf.while_loop fail): compile with steps_per_execution=1."),
)


def mixed_keras_hint(exc_type_name: str, message: str) -> str | None:
    """One line saying what to do, for an error that mixing tf-keras and Keras 3 objects (or
    Keras 3 under MWMS without the corrections) raises; None for any other error.
    `exc_type_name` may be qualified ("tensorflow.errors.InvalidArgumentError")."""
    short = exc_type_name.rsplit(".", 1)[-1]
    for type_name, pattern, hint in _HINTS:
        if short == type_name and re.search(pattern, message, re.DOTALL):
            return hint
    return None
