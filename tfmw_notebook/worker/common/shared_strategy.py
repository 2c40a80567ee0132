"""Hand back the cluster's one MultiWorkerMirroredStrategy to cells that build their own.

The seed tutorials build `tf.distribute.MultiWorkerMirroredStrategy()` and enter
its scope. Inside the shared strategy's scope a second strategy fails ("Mixing
different tf.distribute.Strategy objects"), and collective ops must be set up
before any other TF op anyway, so every construction returns the shared one.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...protocol.warning import TFDistWarning


@dataclass
class Installed:
    """The shared strategy, and the constructors its class had before `install` patched them
    (set once: a later install only swaps the strategy)."""

    shared: Any = None                                  # a tf.distribute strategy
    original_new: Callable[..., Any] | None = None
    original_init: Callable[..., Any] | None = None


_installed = Installed()


def install(shared: Any) -> None:
    """Make MultiWorkerMirroredStrategy(...) (both spellings) return `shared`."""
    # TensorFlow's class, which mypy sees as untyped: Any lets its constructors be replaced.
    base: Any = type(shared)
    if _installed.original_init is not None:
        _installed.shared = shared
        return
    _installed.shared = shared
    _installed.original_new, _installed.original_init = base.__new__, base.__init__
    original_init = base.__init__

    def __new__(cls, *args, **kwargs):
        if args or kwargs:
            warnings.warn(
                "tfmw_notebook: MultiWorkerMirroredStrategy(...) returned the cluster's "
                "shared strategy and ignored its arguments; choose the communication "
                "with `%tfdist start --communication`.",
                TFDistWarning,
                stacklevel=2,
            )
        return _installed.shared

    def __init__(self, *args, **kwargs):
        if self is _installed.shared:
            return  # already built; building again would reset its collectives
        original_init(self, *args, **kwargs)

    base.__new__ = __new__
    base.__init__ = __init__


def shared_strategy() -> Any:
    """The cluster's strategy, or None before the bootstrap made it."""
    return _installed.shared
