"""The base of every callback's logic class: what Keras' Callback gives it, declared.

A module of its own so that the callbacks import it and keras_callbacks.py imports the
callbacks, with no circle between them.
"""

from __future__ import annotations

from typing import Any


class CallbackLogic:
    """What Keras' Callback gives the logic classes (`self.model`, `self.params`), declared
    for type checking only: `keras_callbacks()` puts the real Callback after them."""

    model: Any
    params: dict[str, Any]
