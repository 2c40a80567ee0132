"""Modules that Keras 3 loads with itself on a worker but a cell rarely uses: loaded at
their first use instead of at the engine's start.

Keras 3 imports two optional extras along with itself: its scikit-learn wrappers
(`keras.wrappers`, which import scikit-learn when it is installed) and its image-gallery
helper's `matplotlib.pyplot`: a quarter to two fifths of `import tensorflow` on
`--keras 3` workers (TensorFlow 2.21, Keras 3.15, scikit-learn installed: CPU seconds,
medians of 9 rounds, 5.99 s with them and 4.37 s without, then 5.77 and 3.43 s;
benchmarks/deferred_imports.py). Every worker pays that at every start and restart, on a
host whose cores all its workers share; on the default start (`tf.keras` is tf-keras) at
a cell's first `import keras`.

The modules are the real ones, run in place at their first use: `import` binds the module
at once (its `__file__`, `__spec__`, `__dict__` already set, so code that looks through
sys.modules, as `inspect` does for every traceback, reads them without running it), and
the first read of any other attribute runs it. importlib's LazyLoader would run it at
any attribute read, `__file__` included: every error shown on a worker ran both. A
thread that reads one while another runs it waits for the run to end.
"""

from __future__ import annotations

import importlib.abc
import sys
import threading
import types
from collections.abc import Sequence
from importlib.machinery import ModuleSpec

DEFERRED = frozenset({"keras.wrappers", "matplotlib.pyplot"})

# Where a deferred module keeps the loader that will run it (in its own __dict__).
_LOADER = "__tfmw_deferred_loader__"
_running = threading.RLock()


class _DeferredModule(types.ModuleType):
    """A module not run yet: the first attribute it lacks runs it, in place."""

    def __getattr__(self, name: str):
        with _running:
            loader = self.__dict__.pop(_LOADER, None)
            if loader is not None:   # else it ran, or runs in this thread (a cycle)
                try:
                    loader.exec_module(self)
                except BaseException:
                    sys.modules.pop(self.__name__, None)   # as a failed import leaves it
                    raise
                finally:
                    self.__class__ = types.ModuleType  # type: ignore[assignment]  # ran: plain
        return types.ModuleType.__getattribute__(self, name)


class _DeferredLoader(importlib.abc.Loader):
    def __init__(self, loader: importlib.abc.Loader):
        self.loader = loader

    def create_module(self, spec: ModuleSpec) -> types.ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        module.__loader__ = self.loader
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        module.__dict__[_LOADER] = self.loader
        module.__class__ = _DeferredModule


class _DeferredFinder:
    """On sys.meta_path, ahead of the others: finds a DEFERRED module as they would and
    gives it a loader that leaves it to its first use."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: types.ModuleType | None = None) -> ModuleSpec | None:
        if fullname not in DEFERRED:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is None:
                continue
            if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                spec.loader = _DeferredLoader(spec.loader)
            return spec
        return None


def install() -> None:
    """Defer the modules imported from now on (before `import tensorflow`); once."""
    if not any(isinstance(finder, _DeferredFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _DeferredFinder())
