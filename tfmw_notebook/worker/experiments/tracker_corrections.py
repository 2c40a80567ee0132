"""Corrections to experiment trackers' autologging, for training code as tutorials write it.

MLflow's TensorFlow autolog logs the training dataset, and to name it computes a digest by
iterating the *whole* dataset (mlflow/mlflow#9600, open since 2023). TensorFlow's
distributed tutorials train on `dataset.shuffle(...).repeat().batch(...)` with
`steps_per_epoch`: an infinite dataset, so `fit` never starts. Measured on 2 workers (MLflow
3.17.2): after `mlflow.tensorflow.autolog()`, the tutorial's fit sat in the digest until the
cell's deadline stopped it; a single process would wait forever.

The correction digests a dataset of infinite or unknown length from its first
`DIGEST_ELEMENTS` elements. A finite dataset of known length gets MLflow's own digest, and a
dataset of unknown length that is shorter than the bound gets the same digest as before (the
same elements are hashed). Applied on every worker, chief included, once a cell imports
MLflow's TensorFlow dataset module; nothing here imports MLflow.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ..common import guarded_patches
from ..common.import_hooks import when_imported

# Enough batches to tell datasets apart; bounded so the digest costs what a few steps do.
DIGEST_ELEMENTS = 100

_MARK = "_tfmw_tracker_correction"    # set on every replacement, so nothing is patched twice
_DATASET_MODULE = "mlflow.data.tensorflow_dataset"


def install() -> None:
    """Bound MLflow's dataset digest once a cell imports MLflow's TensorFlow dataset module."""
    when_imported(_DATASET_MODULE, _bound_dataset_digest)


def _bound_dataset_digest(module: Any) -> None:
    guarded_patches.patch(
        "tracker_corrections", f"{_DATASET_MODULE}.TensorFlowDataset."
        "_compute_tensorflow_dataset_digest",
        lambda: guarded_patches.attribute(module, "TensorFlowDataset"), _bounded_digest,
        library="mlflow", risk="mlflow.tensorflow.autolog() may never start a fit on an "
        "infinite dataset (it digests the whole dataset)")


def _bounded_digest(dataset_class: Any) -> None:
    digest = guarded_patches.method(dataset_class, "_compute_tensorflow_dataset_digest",
                                    "dataset", "targets")
    if getattr(digest, _MARK, False):
        return
    dataset_class._compute_tensorflow_dataset_digest = _digesting_a_bounded_prefix(digest)


def _digesting_a_bounded_prefix(digest: Callable) -> Callable:
    @functools.wraps(digest)
    def bounded(self: Any, dataset: Any, targets: Any = None) -> str:
        return digest(self, bounded_prefix(dataset), bounded_prefix(targets))
    setattr(bounded, _MARK, True)
    return bounded


def bounded_prefix(dataset: Any) -> Any:
    """`dataset` itself when its length is known and finite, else its first
    DIGEST_ELEMENTS elements (None stays None)."""
    if dataset is None:
        return None
    import tensorflow as tf  # loaded already: the dataset is TensorFlow's
    length = int(dataset.cardinality())
    if length in (int(tf.data.INFINITE_CARDINALITY), int(tf.data.UNKNOWN_CARDINALITY)):
        return dataset.take(DIGEST_ELEMENTS)
    return dataset
