"""Experiment trackers in a %%tfdist cell: one run, the chief's; the other workers silent.

A cell runs unchanged on every worker, so `mlflow.autolog()` or `wandb.init(...)` runs on
every worker and would open one run per worker. Worse, the workers' logging can diverge.
Measured, `mlflow.tensorflow.autolog()` on 2 workers with MLflow's default store
(`sqlite:///mlflow.db` in the working directory, shared by both): both workers created the
database at once, one failed its migration ("Online migration expected to match one row"),
so its autolog gave up and ran a plain fit, while the other, after the fit, logged the model:
`model.predict` on an input example (for the signature) and a model save, both collectives
under MultiWorkerMirroredStrategy that the first worker never joined. The job stalled until
the collective timed out.

So the other workers keep every call, and with it every collective, but lose their
audience: MLflow logs to a throwaway file store in the worker's own temp directory
(tempdirs.py; gone with the worker), whatever tracking URI the cell sets, with its telemetry
and its log lines off; `wandb.init` runs in W&B's "disabled" mode (a run object whose calls
do nothing). Nothing on those workers reaches a tracking server. The chief is left alone:
it logs where the cell says, as a single process would.

Nothing here imports mlflow or wandb: the changes are made when a cell imports them
(import_hooks.py).
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..common import guarded_patches
from ..common.import_hooks import when_imported

_MARK = "_tfmw_chief_tracking"       # set on every replacement, so nothing is wrapped twice
_STORE_NAME = "tfmw-throwaway-mlruns"


def install(is_chief: bool) -> None:
    """On a worker other than the chief, silence MLflow and W&B once a cell imports them."""
    if is_chief:
        return
    os.environ.update(_quiet_environment())
    when_imported("mlflow", _quiet_mlflow)
    when_imported("wandb", _quiet_wandb)


def throwaway_store_uri() -> str:
    """Where MLflow logs on this worker: a file store in its own temp directory."""
    return Path(tempfile.gettempdir(), _STORE_NAME).as_uri()


def _quiet_environment() -> dict[str, str]:
    """What MLflow and W&B read from the environment (before any cell imports them)."""
    store = throwaway_store_uri()
    return {
        "MLFLOW_TRACKING_URI": store,
        "MLFLOW_REGISTRY_URI": store,
        # MLflow 3 raises on a file store unless told: a throwaway needs no database (an
        # SQLite store takes seconds to create here, a file store nothing).
        "MLFLOW_ALLOW_FILE_STORE": "true",
        "MLFLOW_DISABLE_TELEMETRY": "true",
        "WANDB_MODE": "disabled",
        "WANDB_SILENT": "true",
    }


def _quiet_mlflow(mlflow: Any) -> None:
    """Point MLflow at the throwaway store, for good: a URI the cell sets is ignored here."""
    os.environ.update(_quiet_environment())   # a cell may have changed them since
    guarded_patches.patch(
        "chief_tracking", "mlflow.tracking._tracking_service.utils.set_tracking_uri",
        lambda: guarded_patches.attribute(_tracking_utils(), "set_tracking_uri"),
        lambda setter: setter(throwaway_store_uri()), library="mlflow", on_chief=False,
        risk="the other workers may log to the tracking URI the environment names")
    ignore = _ignoring_setter
    _replace_everywhere("mlflow", "set_tracking_uri", ignore)
    _replace_everywhere("mlflow", "set_registry_uri", ignore)
    # The chief says what went wrong, once; the same lines from every worker are noise.
    logging.getLogger("mlflow").setLevel(logging.ERROR)


def _quiet_wandb(wandb: Any) -> None:
    """`wandb.init` in W&B's disabled mode whatever the cell asks; `wandb.login` does
    nothing (it could prompt for a key or dial the server)."""
    _replace_everywhere("wandb", "init", _disabled_init)
    _replace_everywhere("wandb", "login", lambda login: _marked(lambda *a, **k: True))


def _tracking_utils() -> Any:
    from mlflow.tracking._tracking_service import utils

    return utils


def _ignoring_setter(setter: Callable) -> Callable:
    @functools.wraps(setter)
    def ignore(*args: Any, **kwargs: Any) -> None:
        return None
    return _marked(ignore)


def _disabled_init(init: Callable) -> Callable:
    @functools.wraps(init)
    def disabled(*args: Any, **kwargs: Any) -> Any:
        kwargs["mode"] = "disabled"
        return init(*args, **kwargs)
    return _marked(disabled)


def _marked(function: Callable) -> Callable:
    setattr(function, _MARK, True)
    return function


def _replace_everywhere(package: str, name: str, wrap: Callable[[Callable], Callable]) -> None:
    """Replace the function `package.name` in every module of `package` that binds it
    (MLflow re-exports its setters from several modules); reported when it has none."""
    guarded_patches.patch(
        "chief_tracking", f"{package}.{name}", lambda: sys.modules[package].__dict__[name],
        lambda original: _replace_bindings(package, name, original, wrap), library=package,
        on_chief=False, risk=f"{package}.{name} on the other workers acts as on the chief")


def _replace_bindings(package: str, name: str, original: Callable,
                      wrap: Callable[[Callable], Callable]) -> None:
    if getattr(original, _MARK, False):
        return
    replacement = wrap(original)
    for module_name, module in list(sys.modules.items()):
        # __dict__, not getattr: getattr would load lazy submodules here.
        if (module_name.split(".")[0] == package
                and getattr(module, "__dict__", {}).get(name) is original):
            setattr(module, name, replacement)
