"""What the chief knows of a fit that the notebook does not, for the fit's run record.

The fit's arguments, the optimizer's class and config (with its learning rate), the
loss, the model's parameter count: plain JSON-able data, read from the model and the
call without importing TensorFlow here (Keras 3 and tf-keras both). The Keras
callback that adds the per-epoch metrics and the speed is keras_run_record.py.
"""

from __future__ import annotations

import math
from typing import Any

# The fit() arguments a record keeps (data and callbacks are not hyperparameters; nor is
# `shuffle`, which the hooks set for tf.data pipelines, see keras_hooks.py).
FIT_ARGUMENTS = ("epochs", "batch_size", "steps_per_epoch", "initial_epoch",
                 "validation_split", "validation_steps", "validation_freq", "class_weight")
_DEPTH = 6   # nested configs deeper than this are cut (a record stays small)


def fit_arguments(values: dict[str, Any], *, validation: bool,
                  global_batch: int | None) -> dict[str, Any]:
    """The hyperparameters the call itself gives, from its named arguments."""
    found = {name: plain(values[name]) for name in FIT_ARGUMENTS
             if values.get(name) is not None}
    found["validation"] = validation
    if global_batch:
        found["batch_size"] = int(global_batch)
    return found


def model_facts(model) -> dict[str, Any]:
    """Optimizer (class, config, learning rate), loss and parameter count of `model`."""
    facts: dict[str, Any] = {}
    optimizer = getattr(model, "optimizer", None)
    if optimizer is not None:
        facts["optimizer"] = type(optimizer).__name__
        config = _config(optimizer)
        facts["optimizer_config"] = config
        facts["learning_rate"] = _learning_rate(optimizer, config)
    facts["loss"] = loss_name(getattr(model, "loss", None))
    facts["parameters"] = parameter_count(model)
    return facts


def parameter_count(model) -> int | None:
    try:
        return int(model.count_params())
    except Exception:   # not built yet (a subclassed model before its first step)
        return None


def loss_name(loss: Any) -> str | None:
    if loss is None or isinstance(loss, str):
        return loss
    if isinstance(loss, dict):
        return ", ".join(f"{key}: {loss_name(value)}" for key, value in loss.items())
    if isinstance(loss, (list, tuple)):
        return ", ".join(str(loss_name(value)) for value in loss)
    name = getattr(loss, "__name__", None) or type(loss).__name__
    return str(name)


def _config(optimizer) -> dict[str, Any]:
    try:
        config = optimizer.get_config()
    except Exception:
        return {}
    value = plain(config)
    return value if isinstance(value, dict) else {}


def _learning_rate(optimizer, config: dict[str, Any]) -> float | str | None:
    rate = config.get("learning_rate")
    if isinstance(rate, (int, float)) and not isinstance(rate, bool):
        return float(rate)
    if isinstance(rate, dict):   # a schedule: its class and config
        return str(rate.get("class_name") or rate.get("config") or rate)
    try:
        return float(optimizer.learning_rate)
    except Exception:
        return None


def plain(value: Any, depth: int = 0) -> Any:
    """`value` as JSON-able data: numbers, strings, lists and dicts (others as text)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if depth >= _DEPTH:
        return str(value)
    if isinstance(value, dict):
        return {str(key): plain(item, depth + 1) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item, depth + 1) for item in value]
    if hasattr(value, "item") and getattr(value, "shape", None) in ((), None):
        try:
            return plain(value.item(), depth + 1)   # numpy / TensorFlow scalars
        except Exception:
            pass
    try:
        return plain(float(value), depth + 1)
    except Exception:
        return str(value)
