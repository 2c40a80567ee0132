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

# entry name -> (module under this package, by room, function)
ENTRIES: dict[str, tuple[str, str]] = {
    "describe_engine": ("boot.handshake", "describe_engine"),
    "bootstrap": ("boot.bootstrap", "bootstrap"),
    "versions": ("boot.bootstrap", "versions"),
    "run_cell": ("cells.cell", "run_cell"),
    "missing_names": ("cells.cell", "missing_names"),
    "missing_magics": ("cells.cell", "missing_magics"),
    "tensorboard_log_dirs": ("writes.tensorboard_logs", "log_dirs"),
    "restore_checkpoint": ("writes.checkpointing", "restore_named"),
    "weights_digest": ("writes.checkpointing", "weights_digest"),
    "collective_position": ("liveness.collectives", "position"),
    "collective_probe": ("liveness.collectives", "probe"),
    "diagnose_problem": ("fits.diagnose", "problem"),
    "diagnose_measure": ("fits.diagnose", "measure"),
    "diagnose_result": ("fits.diagnose", "last_result"),
    "trial_report": ("experiments.trial_report", "report"),
    "receive_shards": ("data.shards", "receive"),
}


def resolve(entry: str):
    """The function an entry names (imports its worker module)."""
    module, function = ENTRIES[entry]
    return getattr(importlib.import_module(f"{__package__}.{module}"), function)


def call(entry: str, *args: Any) -> Any:
    return resolve(entry)(*args)
