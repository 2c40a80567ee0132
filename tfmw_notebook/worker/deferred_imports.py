"""Modules that Keras 3 loads with itself on a worker but a cell rarely uses: loaded at
their first use instead of at the engine's start.

Keras 3 imports two optional extras along with itself: its scikit-learn wrappers
(`keras.wrappers`, which import scikit-learn when it is installed) and its image-gallery
helper's `matplotlib.pyplot`: about a quarter of `import tensorflow` on `--keras 3`
workers (TensorFlow 2.21, Keras 3.15, scikit-learn installed: CPU seconds, 9 rounds,
median 5.99 s with them and 4.37 s without; benchmarks/deferred_imports.py). Every worker
pays that at every start and restart, on a host whose cores all its workers share; on
the default start (`tf.keras` is tf-keras) at a cell's first `import keras`.

The modules are the real ones, made lazily (importlib's LazyLoader): `import` binds the
module at once and the first attribute read runs it, in the thread that reads. Cells run
in the engine's main thread; none of this package's threads read these modules.
Python 3.11's LazyLoader has no lock around that first run (3.12 added one), so two
threads reading one of them for the first time at once could see it half run: no code
here does.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

DEFERRED = frozenset({"keras.wrappers", "matplotlib.pyplot"})


class _DeferredFinder:
    """On sys.meta_path, ahead of the others: finds a DEFERRED module as they would and
    gives it a loader that runs it at its first use."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if fullname not in DEFERRED:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is None:
                continue
            if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                spec.loader = importlib.util.LazyLoader(spec.loader)
            return spec
        return None


def install() -> None:
    """Defer the modules imported from now on (before `import tensorflow`); once."""
    if not any(isinstance(finder, _DeferredFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _DeferredFinder())



def waiting(module: object) -> bool:
    """Whether `module` is deferred and has not run yet. Any attribute read would run it
    (even `__dict__`), so code that looks through sys.modules asks this first."""
    return type(module).__name__ == "_LazyModule"
