"""Run records: one per fit() of a %%tfdist cell, kept in its run directory's run.json.

Layout (beside the checkpoints, see checkpoints.py):

    <root>/run-3/run.json       the record of the first fit of a cell (root: ./tfdist_checkpoints)
    <root>/run-3/ckpt-000001/   its checkpoints, if checkpointing was on
    <root>/run-3.2/run.json     a second fit of the same cell: a run of its own, with its own
                                checkpoints (so deleting one fit never touches another's)

run.json keeps the fields the checkpoint writer puts there ("run", "created", "workers",
"tf_version") and adds the record's: "name", "source", "hyperparameters", "sweep",
"history", "epochs", "wall_time", "samples_per_second", "cluster", "checkpoint_dir",
"outcome", "error". A run.json without "outcome" (written before any record) is not a
record. Writes are atomic (a temp file, then os.replace).
"""

from __future__ import annotations

import math
import os
import re
import shutil
import time
import uuid
from typing import Any

from . import checkpoints
from .checkpoints import RUN_FILE, TEMP_PREFIX

COMPLETED, FAILED, INTERRUPTED, RESTORED = "completed", "failed", "interrupted", "restored"
PRUNED = "pruned"   # a sweep's trial its --prune rule stopped (the fit returned early)
OUTCOMES = (COMPLETED, FAILED, INTERRUPTED, RESTORED, PRUNED)
RUN_PREFIX = "run-"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
# run-N, a second fit's run-N.2, a sweep's trials run-N-trial-K (and their run-N-trial-K.2)
_NUMBERED = re.compile(re.escape(RUN_PREFIX) + r"(\d+)(?:-trial-\d+)?(?:\.\d+)?")


# What the workers publish while a cell runs: the chief's record of fit K (as it grows),
# and, from any rank whose fit K raised, a flag.
RUN_KEY, RAISED_KEY = "tfmw-run-", "tfmw-run-raised-"


def run_key(index: int) -> str:
    return f"{RUN_KEY}{index}"


def raised_key(index: int) -> str:
    return f"{RAISED_KEY}{index}"


def name_problem(name: str, root: str) -> str:
    """Why `name` cannot name a new run under `root` ("" if it can)."""
    if not isinstance(name, str) or not _NAME.fullmatch(name) or name.endswith("."):
        return (f"run name {name!r} is not usable: use letters, digits, '_', '-' and '.' "
                "(at most 100, starting with a letter or digit)")
    taken = re.compile(re.escape(name) + r"(\.\d+)?")   # NAME.2 is its second fit's
    used = sorted(entry for entry in _entries(root) if taken.fullmatch(entry))
    if used:
        return (f"run name {name!r} is already used under {root} ({used[0]}): pick another "
                f"name, or delete that run first (%tfdist runs --delete {used[0]})")
    return ""


def next_run_name(root: str) -> str:
    """'run-N', N one more than the largest run-N (or run-N.K) under `root`."""
    numbers = [int(match.group(1)) for match in map(_NUMBERED.fullmatch, _entries(root))
               if match]
    return f"{RUN_PREFIX}{max(numbers, default=0) + 1}"


def _entries(root: str) -> list[str]:
    try:
        return os.listdir(root)
    except (FileNotFoundError, NotADirectoryError):
        return []


def fit_run_dir(run_dir: str, index: int) -> str:
    """The run directory of a cell's fit number `index` (1: the cell's own)."""
    return run_dir if index <= 1 else f"{os.path.normpath(run_dir)}.{index}"


def is_record(data: Any) -> bool:
    return isinstance(data, dict) and data.get("outcome") in OUTCOMES


def read_record(run_dir: str) -> dict[str, Any] | None:
    """The record in `run_dir`, or None (no run.json, or one that is not a record)."""
    data = checkpoints.read_run(run_dir)
    if not is_record(data):
        return None
    assert data is not None
    data["name"] = str(data.get("name") or os.path.basename(os.path.normpath(run_dir)))
    data["run_dir"] = os.path.abspath(run_dir)
    return data


def list_records(root: str) -> list[dict[str, Any]]:
    """Every record directly under `root`, oldest first (by when the run began)."""
    try:
        names = sorted(os.listdir(root))
    except (FileNotFoundError, NotADirectoryError):
        return []
    found = [read_record(os.path.join(root, name)) for name in names
             if not name.startswith(".")]
    records = [record for record in found if record is not None]
    return sorted(records, key=lambda r: (_number(r.get("created")), r["name"]))


def write_record(run_dir: str, record: dict[str, Any]) -> str:
    """Write `record` into `<run_dir>/run.json` atomically; returns the file's path.

    Fields already there (the checkpoint writer's) are kept; a run continued from its
    own checkpoint (--resume-from) keeps the epochs before the one it resumed at.
    """
    if not is_record(record):
        raise ValueError(f"Invalid value for argument `record`. Received: outcome="
                         f"{record.get('outcome')!r}. Expected one of {OUTCOMES}")
    os.makedirs(run_dir, exist_ok=True)
    old = checkpoints.read_run(run_dir) or {}
    merged = {**old, **record}
    merged.setdefault("created", time.time())
    merged.setdefault("run", os.path.basename(os.path.normpath(run_dir)))
    merged["finished_at"] = time.time()
    if is_record(old):
        merged["history"], merged["epochs"] = continued(old, record)
    merged.pop("run_dir", None)
    path = os.path.join(run_dir, RUN_FILE)
    checkpoints.write_json_atomic(
        path, merged, temp=os.path.join(run_dir, f"{TEMP_PREFIX}{RUN_FILE}-{_nonce()}"))
    return path


def continued(old: dict[str, Any], new: dict[str, Any]) -> tuple[dict[str, list[float]],
                                                                  list[int]]:
    """History and epochs of a run that went on: `old`'s epochs before `new`'s first, then
    `new`'s (a resumed run, or a fit that resumed from its backup after a restart)."""
    new_epochs = list(new.get("epochs") or [])
    start = new_epochs[0] if new_epochs else math.inf
    old_epochs = list(old.get("epochs") or [])
    keep = [i for i, epoch in enumerate(old_epochs) if epoch < start]
    history = {}
    for key in {**(old.get("history") or {}), **(new.get("history") or {})}:
        before = list((old.get("history") or {}).get(key) or [])
        history[key] = ([before[i] for i in keep if i < len(before)]
                        + list((new.get("history") or {}).get(key) or []))
    return history, [old_epochs[i] for i in keep] + new_epochs


def delete_run(root: str, name: str) -> str:
    """Remove the run `name` under `root`: its record and its checkpoints, nothing else.

    Refuses a directory that holds no record. Returns the removed directory's path."""
    path = os.path.join(root, name)
    if not _NAME.fullmatch(name or "") or read_record(path) is None:
        known = ", ".join(r["name"] for r in list_records(root)) or "none"
        raise ValueError(f"no run named {name!r} under {root} (runs: {known})")
    # Out of the listing in one rename, so no reader sees a half-deleted run.
    doomed = os.path.join(root, f"{TEMP_PREFIX}deleted-{name}-{_nonce()}")
    os.rename(path, doomed)
    shutil.rmtree(doomed, ignore_errors=True)
    return path


def final_and_best(values: list[float], metric: str) -> tuple[float | None, float | None]:
    """The last finite value, and the best (largest for accuracy-like metrics)."""
    finite = [float(v) for v in values if _is_finite(v)]
    if not finite:
        return None, None
    return finite[-1], (max(finite) if higher_is_better(metric) else min(finite))


def higher_is_better(metric: str) -> bool:
    """As --monitor-mode auto decides (checkpoints.monitor_mode: Keras' rule)."""
    return checkpoints.monitor_mode(metric) == "max"


def _is_finite(value: Any) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))


def _number(value: Any) -> float:
    return float(value) if _is_finite(value) else 0.0


def _nonce() -> str:
    return uuid.uuid4().hex[:12]


def fit_outcome(fit: dict[str, Any], cell_outcome: str, raised: bool) -> str:
    """How one fit of a cell ended, given how the cell ended and whether a rank's fit raised.

    A fit the chief finished and no rank raised in is complete, even if the cell failed
    later; in a cell that ended well every fit shares its outcome (restored when the
    cell needed restarts or resumed from a checkpoint), or pruned when a sweep's rule
    stopped it."""
    if cell_outcome in (COMPLETED, RESTORED):
        return PRUNED if fit.get("pruned_at") is not None else cell_outcome
    if cell_outcome == INTERRUPTED:
        return COMPLETED if fit.get("finished") and not raised else INTERRUPTED
    return COMPLETED if fit.get("finished") and not raised else FAILED


def make_record(fit: dict[str, Any], *, name: str, source: str, sweep: dict[str, Any],
                cluster: dict[str, Any], checkpoint_dir: str | None, outcome: str,
                error: str = "") -> dict[str, Any]:
    """One fit's record from the chief's part (`fit`) and the notebook's."""
    return {
        "name": name,
        "source": source,
        "hyperparameters": dict(fit.get("hyperparameters") or {}),
        "sweep": dict(sweep),
        "history": {key: list(values) for key, values in (fit.get("history") or {}).items()},
        "epochs": list(fit.get("epochs") or []),
        "wall_time": fit.get("wall_time"),
        "samples_per_second": fit.get("samples_per_second"),
        "steps": fit.get("steps"),
        "cluster": dict(cluster),
        "workers": cluster.get("workers"),
        "tf_version": cluster.get("tf_version"),
        "checkpoint_dir": checkpoint_dir,
        "fit": fit.get("fit", 1),
        "outcome": outcome,
        "error": error if outcome in (FAILED, INTERRUPTED) else "",
    }
