"""tf-keras loads `.weights.h5` and `.keras` files into a model built under a strategy.

tf-keras' H5IOStore hands each layer its h5py datasets, and `Layer.load_own_variables`
assigns them as they are. A variable kept per replica and summed on read (a compiled metric's
`total` and `count`, under MultiWorkerMirroredStrategy or MirroredStrategy) divides the value
by the number of replicas before converting it to a tensor
(tensorflow/python/distribute/values_util.py, `on_read_assign_cross_replica`), and an h5py
dataset cannot be divided: `model.load_weights("x.weights.h5")`, and a `load_model` of a
`.keras` file inside the strategy's scope, raised `TypeError: unsupported operand type(s) for
/: 'Dataset' and 'int'` on every worker (measured; TensorFlow's "Distributed training with
Keras" tutorial loads its newest ModelCheckpoint file this way). Keras 3 reads arrays. Here
tf-keras' store hands out arrays too: the values, and every other load, stay the same.
"""

from __future__ import annotations

import collections.abc
import functools
from typing import Any

from ..common import guarded_patches
from ..common.import_hooks import when_imported

_MARK = "_tfmw_h5_arrays"          # set on the replacement, so nothing is patched twice


def install() -> None:
    """Correct tf-keras' store when tf-keras' saving library is imported (now, if it is)."""
    when_imported("tf_keras.src.saving.saving_lib", _read_arrays_from_h5_stores)


def _read_arrays_from_h5_stores(saving_lib: Any) -> None:
    guarded_patches.patch(
        "tf_keras_h5_loading", "tf_keras.src.saving.saving_lib.H5IOStore.get",
        lambda: guarded_patches.attribute(saving_lib, "H5IOStore"), _arrays_from_get,
        risk="tf-keras' load_weights of a .weights.h5 file may fail on the workers "
             "('unsupported operand type(s) for /: 'Dataset' and 'int'')", library="tf_keras")


def _arrays_from_get(store: Any) -> None:
    get = guarded_patches.method(store, "get", "path")
    if getattr(get, _MARK, False):
        return

    @functools.wraps(get)
    def get_arrays(self, path):
        entries = get(self, path)
        return entries if isinstance(entries, dict) else _Arrays(entries)  # {}: none stored

    setattr(get_arrays, _MARK, True)
    store.get = get_arrays


class _Arrays(collections.abc.Mapping):
    """One layer's group of h5py datasets, each read as a numpy array (or scalar)."""

    def __init__(self, group: Any) -> None:
        self._group = group

    def __getitem__(self, key: str) -> Any:
        return self._group[key][()]

    def __iter__(self):
        return iter(self._group)

    def __len__(self) -> int:
        return len(self._group)
