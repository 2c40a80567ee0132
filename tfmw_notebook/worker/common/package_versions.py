"""Which TensorFlow, Keras and tf-keras a worker has, whichever distribution brought them.

One module is installed by several distributions: `tensorflow` by tensorflow, tensorflow-cpu,
tensorflow-macos, tensorflow-intel or tf-nightly; `tf_keras` by tf-keras or tf-keras-nightly;
`keras` by keras or keras-nightly. A lookup of one distribution name fails on the others
(DESIGN fact 30: `PackageNotFoundError: No package metadata was found for tf-keras` on the
nightlies stopped every worker's start). So a version is read from the imported module's
`__version__` first, then from the first installed distribution that provides the module.
Nothing here imports the module: the bootstrap asks before TensorFlow is imported.
"""

from __future__ import annotations

import importlib.metadata
import sys

# Each module's distributions, the usual one first.
DISTRIBUTIONS: dict[str, tuple[str, ...]] = {
    "tensorflow": ("tensorflow", "tensorflow-cpu", "tensorflow-macos", "tensorflow-intel",
                   "tf-nightly", "tf-nightly-cpu", "tensorflow-cpu-aws"),
    "tf_keras": ("tf-keras", "tf-keras-nightly"),
    "keras": ("keras", "keras-nightly"),
}

# How a line names each library.
NAMES: dict[str, str] = {"tensorflow": "TensorFlow", "tf_keras": "tf-keras", "keras": "Keras",
                         "mlflow": "MLflow", "wandb": "W&B"}


def version(module: str) -> str | None:
    """`module`'s version: the imported module's `__version__`, else the installed
    distribution's; None when neither is there."""
    found = getattr(sys.modules.get(module), "__version__", None)
    if isinstance(found, str):
        return found
    return installed_version(module)


def installed_version(module: str) -> str | None:
    """The version of the first installed distribution that provides `module` (by the
    known names, else one named after the module), without importing it."""
    for distribution in DISTRIBUTIONS.get(module, (module.replace("_", "-"),)):
        try:
            return importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def describe(module: str) -> str:
    """E.g. 'Keras 3.16.0.dev2026102704', 'tf-keras 2.21.0', 'MLflow not installed'."""
    name = NAMES.get(module, module)
    found = version(module)
    return f"{name} {found}" if found else f"{name} not installed"
