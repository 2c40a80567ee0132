"""What a resumed fit's random layers draw from: the resume line's part on random state.

Keras 3 backs its seed generators' state up with the weights
(writes/random_state_backup.py): the line says it was given back, or why not. tf-keras'
random layers draw, by default, from stateful random ops ("legacy_stateful") whose state
lives in the op kernels, where no checkpoint reaches it: after a restart they draw from
their start, and the fit cannot end with the undisturbed weights. The line names them
and the way out: with `enable_tf_random_generator()` they draw from tf.random.Generators,
whose state is backed up as Keras 3's is (tests/test_random_state_resume.py).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from ..corrections import keras_flavour
from ..writes import random_state_backup

_TF_KERAS_FIX = ("tf.keras.backend.experimental.enable_tf_random_generator() before "
                 "building the model makes it resumable")


def resume_line(model: Any) -> str:
    """'; ...' to add to the resume line, or '' where there is nothing to say."""
    said = random_state_backup.outcome()
    if said is not None or keras_flavour.keras_of(model) == 3:
        return f"; {said}" if said else ""
    kinds = Counter(type(layer).__name__ for layer in _stateful_op_layers(model))
    if not kinds:
        return ""
    count = sum(kinds.values())
    return (f"; its {count} random layer{'s' if count > 1 else ''} ({', '.join(sorted(kinds))})"
            f" draw anew: tf-keras keeps their state in its stateful random ops, which no "
            f"backup holds; {_TF_KERAS_FIX}")


def _stateful_op_layers(model: Any) -> list:
    """tf-keras layers whose random generator draws from stateful random ops."""
    flatten = getattr(model, "_flatten_layers", None)
    if flatten is None:
        return []
    return [layer for layer in flatten(include_self=False)
            if getattr(getattr(layer, "_random_generator", None), "_rng_type", None)
            == "legacy_stateful"]
