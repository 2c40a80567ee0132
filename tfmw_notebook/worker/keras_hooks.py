"""Report every Keras fit/evaluate to the dashboard with no change to the user's code.

`Model.fit` and `Model.evaluate` are wrapped once per worker: while a cell runs
with the dashboard on, they get a reporting callback, and Keras' own progress
bar is turned off unless the user asked for a `verbose` level themselves.
"""

from __future__ import annotations

import functools

from .reporting import EventPublisher, make_keras_callback

_settings = {"report": False, "quiet_progress": False}
_publisher: list[EventPublisher] = []

# Positions of `verbose` and `callbacks` among the positional arguments after `x`.
_FIT_POSITIONS = {"verbose": 4, "callbacks": 5}
_EVALUATE_POSITIONS = {"verbose": 3, "callbacks": 6}


def configure(*, report: bool, quiet_progress: bool) -> None:
    """Called before each cell: what the cell's fit/evaluate calls should do."""
    _settings.update(report=report, quiet_progress=quiet_progress)


def install(publisher: EventPublisher) -> None:
    import tensorflow as tf

    _publisher[:] = [publisher]
    model = tf.keras.Model
    if getattr(model.fit, "_tfmw_wrapped", False):
        return
    model.fit = _wrapped(model.fit, _FIT_POSITIONS)
    model.evaluate = _wrapped(model.evaluate, _EVALUATE_POSITIONS)


def _wrapped(method, positions: dict[str, int]):
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        if _settings["report"] and _publisher:
            _add_reporting(args, kwargs, positions)
        return method(self, *args, **kwargs)

    wrapper._tfmw_wrapped = True
    return wrapper


def _add_reporting(args: tuple, kwargs: dict, positions: dict[str, int]) -> None:
    if len(args) > positions["callbacks"]:
        return  # callbacks given positionally: leave the call exactly as written
    callbacks = list(kwargs.get("callbacks") or [])
    callbacks.append(make_keras_callback(_publisher[0]))
    kwargs["callbacks"] = callbacks
    user_chose_verbose = "verbose" in kwargs or len(args) > positions["verbose"]
    if _settings["quiet_progress"] and not user_chose_verbose:
        kwargs["verbose"] = 0
