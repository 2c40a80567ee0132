"""Which Keras this worker runs: Keras 3 (as TensorFlow ships it) or tf-keras.

The notebook chose it (`%tfdist start --keras 3|2`) and put it in the environment TF
reads at import (TF_USE_LEGACY_KERAS). Keras 3 gets its corrections for
MultiWorkerMirroredStrategy (keras3_corrections.py) once the strategy exists; on tf-keras
workers `import keras` is still Keras 3, so it gets them when a cell first imports it
(importing Keras 3 at start-up would lengthen every start for cells that never use it).
"""

from __future__ import annotations

import importlib.util
import socket

from ..common import package_versions
from ..common.import_hooks import when_imported


class KerasSetupError(RuntimeError):
    """The chosen Keras cannot run here; the message says how to fix it."""


def check_installed(keras: int, tf_version: str) -> None:
    """Fail with an actionable message when the chosen Keras is missing."""
    host = socket.gethostname()
    if keras == 2 and importlib.util.find_spec("tf_keras") is None:
        pin = ".".join(tf_version.split(".")[:2]) + ".*" if tf_version != "unknown" else ""
        fix = f"pip install 'tf-keras=={pin}'" if pin else "pip install tf-keras"
        raise KerasSetupError(
            f"tf-keras is not installed in the engines' Python on {host} (TensorFlow "
            f"{tf_version}): run `{fix}` there, or start with `--keras 3`")
    if keras == 3 and not _keras_major_is(3):
        raise KerasSetupError(
            f"Keras 3 is not installed in the engines' Python on {host} (TensorFlow "
            f"{tf_version}): run `pip install 'keras>=3'` there, or start with `--keras 2`")


def _keras_major_is(major: int) -> bool:
    # keras or keras-nightly (package_versions.py), read without importing Keras.
    version = package_versions.installed_version("keras")
    return version is not None and version.split(".")[0] == str(major)


def prepare(keras: int) -> None:
    """After the strategy exists: Keras 3 gets its corrections (keras3_corrections.py), now
    if it is `tf.keras`, else when a cell first imports `keras`."""
    from . import keras3_corrections

    if keras == 3:
        keras3_corrections.apply()
    else:
        when_imported("keras", lambda module: keras3_corrections.apply())


def describe() -> str:
    """'Keras 3.15.1' or 'tf-keras 2.21.0': what `tf.keras` is on this worker."""
    import tensorflow as tf

    if tf.keras.__name__.split(".")[0] == "tf_keras":
        return package_versions.describe("tf_keras")
    return package_versions.describe("keras")


def keras_of(model) -> int | None:
    """3 for a Keras 3 model, 2 for a tf-keras one (a user's subclass: its Keras base),
    None for anything else. Both Kerases may meet on a tf-keras worker, where
    `import keras` is Keras 3."""
    for cls in type(model).__mro__:
        package = cls.__module__.split(".")[0]
        if package in ("keras", "tf_keras"):
            return 3 if package == "keras" else 2
    return None


def keras_package(model):
    """The Keras module `model` belongs to (`keras` or `tf_keras`), for its callbacks."""
    return importlib.import_module("tf_keras" if keras_of(model) == 2 else "keras")
