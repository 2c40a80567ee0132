"""Every function the notebook may call on an engine, by name: the worker side of the door.

The notebook sends `call` itself (by reference: this module is installed on every
engine) with an entry's name; the engine imports the worker module the entry
names, there, and calls it. cluster/cells/worker_calls.py holds the other side: one typed
method per entry. Frames of this package's worker code are dropped from the
tracebacks shown to the user (errors.py).
"""

from __future__ import annotations

import importlib
from typing import Any

# entry name -> (module under tfmw_notebook.worker, function)
ENTRIES: dict[str, tuple[str, str]] = {
    "describe_engine": ("handshake", "describe_engine"),
    "bootstrap": ("bootstrap", "bootstrap"),
    "versions": ("bootstrap", "versions"),
    "run_cell": ("cell", "run_cell"),
    "missing_names": ("cell", "missing_names"),
    "missing_magics": ("cell", "missing_magics"),
    "tensorboard_log_dirs": ("tensorboard_logs", "log_dirs"),
    "restore_checkpoint": ("checkpointing", "restore_named"),
    "weights_digest": ("checkpointing", "weights_digest"),
    "collective_position": ("collectives", "position"),
    "collective_probe": ("collectives", "probe"),
    "diagnose_problem": ("diagnose", "problem"),
    "diagnose_measure": ("diagnose", "measure"),
    "diagnose_result": ("diagnose", "last_result"),
    "trial_report": ("trial_report", "report"),
    "receive_shards": ("shards", "receive"),
}


def resolve(entry: str):
    """The function an entry names (imports its worker module)."""
    module, function = ENTRIES[entry]
    return getattr(importlib.import_module(f"{__package__}.{module}"), function)


def call(entry: str, *args: Any) -> Any:
    return resolve(entry)(*args)
