"""Hand back the cluster's one MultiWorkerMirroredStrategy to cells that build their own.

The seed tutorials build `tf.distribute.MultiWorkerMirroredStrategy()` and enter
its scope. Inside the shared strategy's scope a second strategy fails ("Mixing
different tf.distribute.Strategy objects"), and collective ops must be set up
before any other TF op anyway, so every construction returns the shared one.
"""

from __future__ import annotations

import warnings

_installed: dict = {}


def install(shared) -> None:
    """Make MultiWorkerMirroredStrategy(...) (both spellings) return `shared`."""
    base = type(shared)
    if _installed:
        _installed["shared"] = shared
        return
    _installed.update(shared=shared, new=base.__new__, init=base.__init__)
    original_init = base.__init__

    def __new__(cls, *args, **kwargs):
        if args or kwargs:
            warnings.warn(
                "tfmw_notebook: MultiWorkerMirroredStrategy(...) returned the cluster's "
                "shared strategy and ignored its arguments; choose the communication "
                "with `%tfdist start --communication`.",
                stacklevel=2,
            )
        return _installed["shared"]

    def __init__(self, *args, **kwargs):
        if self is _installed["shared"]:
            return  # already built; building again would reset its collectives
        original_init(self, *args, **kwargs)

    base.__new__ = __new__
    base.__init__ = __init__


def shared_strategy():
    return _installed.get("shared")
