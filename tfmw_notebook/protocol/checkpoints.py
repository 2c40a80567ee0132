"""The on-disk checkpoint catalog: list, resolve, write atomically, prune.

No TensorFlow here: the worker-side saver writes the TensorFlow files into a
directory this module prepares, and the picker widget renders what it lists.

Layout (fixed):

    <root>/<run name>/              a training run (root defaults to ./tfdist_checkpoints/)
        run.json                    {"run", "created", "workers", "tf_version"}
        ckpt-000003/                a complete checkpoint after 3 epochs
            meta.json               {"epoch", "step", "metrics", "wall_time", "saved_at",
                                     "tf_version", "run", "model", "keras"}
            model.json              the architecture, so the notebook can rebuild the model
                                    (with Keras 3, or tf-keras: meta.json's "keras", 3 or 2)
            weights.*               a tf.train.Checkpoint of the model, its optimizer and
                                    its random layers' generator states
        .tmp-ckpt-000004-<nonce>/   being written, or left by a writer that died: not a checkpoint

A checkpoint is complete iff its directory is named ckpt-NNNNNN and holds a meta.json
that parses as a JSON object with an integer "epoch". Writers fill a `.tmp-` directory
(meta.json last) and `commit` renames it into place, which is atomic on POSIX: a crash
leaves only `.tmp-` debris, never a half-written ckpt-NNNNNN.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import shutil
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .events import metric_values

CHECKPOINT_PREFIX = "ckpt-"
TEMP_PREFIX = ".tmp-"
DEFAULT_ROOT = "tfdist_checkpoints"
META_FILE = "meta.json"
RUN_FILE = "run.json"
WEIGHTS = "weights"          # tf.train.Checkpoint prefix inside a checkpoint directory
MODEL_JSON = "model.json"

_CHECKPOINT_NAME = re.compile(re.escape(CHECKPOINT_PREFIX) + r"(\d{6,})")
_TRAIN_HINT = "train with %%tfdist --checkpoint-dir ... first"
_MODES = ("auto", "min", "max")
# Keras 3's built-in metrics whose `_direction` is "up" (larger is better), by their
# default names; ModelCheckpoint(mode="auto") maximizes these.
_LARGER_IS_BETTER = frozenset({
    "accuracy", "binary_accuracy", "categorical_accuracy", "sparse_categorical_accuracy",
    "top_k_categorical_accuracy", "sparse_top_k_categorical_accuracy", "precision", "recall",
    "auc", "precision_at_recall", "recall_at_precision", "sensitivity_at_specificity",
    "specificity_at_sensitivity", "fbeta_score", "f1_score", "iou", "binary_iou", "mean_iou",
    "one_hot_iou", "one_hot_mean_iou", "pearson_correlation", "concordance_correlation",
    "cosine_similarity", "r2_score"})


def trackables(model: Any) -> dict[str, Any]:
    """What a checkpoint holds: the model, its optimizer and the state its random layers
    draw from (to resume exactly)."""
    found = {"model": model}
    optimizer = getattr(model, "optimizer", None)
    if optimizer is not None:
        found["optimizer"] = optimizer
    states = random_states(model)
    if states:
        found["random_state"] = states
    return found


def random_states(model: Any) -> list[Any]:
    """The variables a model's random layers draw from, in the model's order: Keras 3's
    seed generators (its variables that are not weights: a checkpoint of the model holds
    only its weights) and the tf.random.Generators of tf-keras layers (made with
    `enable_tf_random_generator()`; a Sequential model's checkpoint leaves out layers
    without weights). tf-keras' default stateful random ops hold no state to save."""
    if any(cls.__module__.startswith("tf_keras.") for cls in type(model).__mro__):
        flatten = getattr(model, "_flatten_layers", None)
        layers = flatten(include_self=False) if flatten is not None else []
        generators = (getattr(getattr(layer, "_random_generator", None), "_generator", None)
                      for layer in layers)
        return [g.state for g in generators if g is not None and hasattr(g, "state")]
    weights = getattr(model, "weights", None)
    variables = getattr(model, "variables", None)
    if weights is None or variables is None:
        return []
    ids = {id(v) for v in weights}
    return [v for v in variables if id(v) not in ids]


def checkpoint_name(epoch: int) -> str:
    """'ckpt-000003' for epoch 3 (the number of epochs completed)."""
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
        raise ValueError(_invalid("epoch", epoch, "an integer >= 0"))
    return f"{CHECKPOINT_PREFIX}{epoch:06d}"


@dataclass(frozen=True)
class CheckpointInfo:
    """One complete checkpoint, as its meta.json describes it."""

    path: str
    name: str
    epoch: int
    step: int | None = None
    metrics: dict[str, float] = field(default_factory=dict, hash=False)
    wall_time: float | None = None
    saved_at: float | None = None
    tf_version: str | None = None
    run: str | None = None
    model: str | None = None
    keras: int | None = None   # 3 or 2; None: saved before it was recorded (tf-keras)


# -- reading -----------------------------------------------------------------------


def read_checkpoint(path: str | os.PathLike[str]) -> CheckpointInfo | None:
    """The checkpoint at `path`, or None if it is not a complete checkpoint."""
    info, _ = _read_checkpoint(os.fspath(path))
    return info


def _load_meta(directory: str) -> tuple[dict[str, Any] | None, str]:
    """(meta, "") or (None, why the directory has no usable meta.json)."""
    if not os.path.isdir(directory):
        return None, "not a directory"
    meta_path = os.path.join(directory, META_FILE)
    if not os.path.isfile(meta_path):
        return None, f"no {META_FILE}"
    try:
        with open(meta_path, encoding="utf-8") as file:
            meta = json.load(file)
    except (OSError, ValueError):
        return None, f"{META_FILE} is not valid JSON"
    epoch = meta.get("epoch") if isinstance(meta, dict) else None
    if isinstance(epoch, bool) or not isinstance(epoch, int):
        return None, f"{META_FILE} has no integer \"epoch\""
    return meta, ""


def _read_checkpoint(path: str) -> tuple[CheckpointInfo | None, str]:
    """(info, "") or (None, why it is not a complete checkpoint)."""
    meta, why = _load_meta(path)
    if meta is None:
        return None, why
    name = os.path.basename(os.path.normpath(path))
    if not _CHECKPOINT_NAME.fullmatch(name):
        return None, f"its name is not {CHECKPOINT_PREFIX}NNNNNN"
    metrics = meta.get("metrics")
    return CheckpointInfo(
        path=path,
        name=name,
        epoch=meta["epoch"],
        step=_int_or_none(meta.get("step")),
        metrics=metric_values(metrics if isinstance(metrics, dict) else {}),
        wall_time=_float_or_none(meta.get("wall_time")),
        saved_at=_float_or_none(meta.get("saved_at")),
        tf_version=_str_or_none(meta.get("tf_version")),
        run=_str_or_none(meta.get("run")),
        model=_str_or_none(meta.get("model")),
        keras=_int_or_none(meta.get("keras")),
    ), ""


def list_checkpoints(run_dir: str | os.PathLike[str]) -> list[CheckpointInfo]:
    """The complete checkpoints of a run, oldest epoch first (temp and broken ones left out)."""
    run_dir = os.fspath(run_dir)
    try:
        names = os.listdir(run_dir)
    except (FileNotFoundError, NotADirectoryError):
        return []
    found = []
    for name in names:
        if _CHECKPOINT_NAME.fullmatch(name):
            info = read_checkpoint(os.path.join(run_dir, name))
            if info is not None:
                found.append(info)
    return sorted(found, key=lambda info: (info.epoch, info.name))


def read_run(run_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The run's run.json as a dict, or None if it is missing or unreadable."""
    try:
        with open(os.path.join(os.fspath(run_dir), RUN_FILE), encoding="utf-8") as file:
            run = json.load(file)
    except (OSError, ValueError):
        return None
    return run if isinstance(run, dict) else None


def _is_run_dir(path: str) -> bool:
    if not os.path.isdir(path):
        return False
    if os.path.isfile(os.path.join(path, RUN_FILE)):
        return True
    try:
        return any(name.startswith(CHECKPOINT_PREFIX) for name in os.listdir(path))
    except OSError:
        return False


def _run_time(run_dir: str) -> float:
    created = (read_run(run_dir) or {}).get("created")
    if (isinstance(created, (int, float)) and not isinstance(created, bool)
            and math.isfinite(created)):
        return float(created)
    try:
        return os.path.getmtime(run_dir)
    except OSError:
        return 0.0


def list_runs(root: str | os.PathLike[str] = DEFAULT_ROOT) -> list[str]:
    """Run directories under `root` (with a run.json or a ckpt-NNNNNN), newest first."""
    root = os.fspath(root)
    try:
        names = os.listdir(root)
    except (FileNotFoundError, NotADirectoryError):
        return []
    runs = [os.path.join(root, name) for name in names
            if not name.startswith(".") and _is_run_dir(os.path.join(root, name))]
    return sorted(runs, key=lambda run: (_run_time(run), run), reverse=True)


# -- resolving a user's choice -----------------------------------------------------


def resolve(spec: str, root: str | os.PathLike[str] = DEFAULT_ROOT) -> CheckpointInfo:
    """'latest', a run directory (its latest checkpoint) or a checkpoint directory.

    Relative paths are tried as given, then under `root`. Raises ValueError with a
    one-line message saying what is wrong and what to do.
    """
    root = os.fspath(root)
    shown_root = root.rstrip("/\\") + "/"
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"no checkpoint given ({spec!r}): pass 'latest', a run directory "
                         f"or a {CHECKPOINT_PREFIX}NNNNNN directory")
    spec = spec.strip()
    if spec == "latest":
        return _latest_under(root, shown_root)
    path = _existing_directory(spec, root, shown_root)
    name = os.path.basename(os.path.normpath(path))
    if (_CHECKPOINT_NAME.fullmatch(name) or name.startswith(TEMP_PREFIX)
            or os.path.exists(os.path.join(path, META_FILE))):
        return _read_named_checkpoint(spec, path, name)
    checkpoints = list_checkpoints(path)
    if checkpoints:
        return checkpoints[-1]
    if _is_run_dir(path):
        unfinished = any(n.startswith(TEMP_PREFIX) for n in os.listdir(path))
        detail = " (only unfinished ones)" if unfinished else ""
        raise ValueError(f"run {spec} has no complete checkpoint yet{detail}: {_TRAIN_HINT}")
    runs = [os.path.basename(run) for run in list_runs(path)]
    if runs:
        raise ValueError(f"{spec} holds runs, not checkpoints: pick one of {_choices(runs)} "
                         f"(or 'latest' with root {spec})")
    raise ValueError(f"{spec} is neither a run nor a checkpoint directory: give 'latest', a run "
                     f"directory under {shown_root} or a {CHECKPOINT_PREFIX}NNNNNN directory")


def _latest_under(root: str, shown_root: str) -> CheckpointInfo:
    for run_dir in list_runs(root) + ([root] if _is_run_dir(root) else []):
        checkpoints = list_checkpoints(run_dir)
        if checkpoints:
            return checkpoints[-1]
    raise ValueError(f"no checkpoint found under {shown_root}: {_TRAIN_HINT}")


def _existing_directory(spec: str, root: str, shown_root: str) -> str:
    """`spec` as given or under `root`; a ValueError naming the runs there if neither exists."""
    path = spec
    if not os.path.exists(path) and not os.path.isabs(spec):
        path = os.path.join(root, spec)
    if not os.path.exists(path):
        runs = [os.path.basename(run) for run in list_runs(root)]
        options = (f"runs under {shown_root}: {_choices(runs)}" if runs
                   else f"no runs under {shown_root} yet")
        raise ValueError(f"{spec} does not exist: give 'latest', a run directory or a "
                         f"{CHECKPOINT_PREFIX}NNNNNN directory ({options})")
    if not os.path.isdir(path):
        raise ValueError(f"{spec} is a file, not a checkpoint directory: give its "
                         f"{CHECKPOINT_PREFIX}NNNNNN directory or the run directory")
    return path


def _read_named_checkpoint(spec: str, path: str, name: str) -> CheckpointInfo:
    """A directory named like a checkpoint: its info, or why it cannot be used."""
    info, why = _read_checkpoint(path)
    if info is not None:
        return info
    siblings = [c.name for c in list_checkpoints(os.path.dirname(os.path.normpath(path)))]
    if name.startswith(TEMP_PREFIX):
        problem = f"{spec} is an unfinished checkpoint (being written, or its writer died)"
    else:
        problem = f"{spec} is not a checkpoint directory ({why})"
    fix = f"pick one of {_choices(siblings)}" if siblings else _TRAIN_HINT
    raise ValueError(f"{problem}: {fix}")


def _choices(names: Sequence[str], limit: int = 8) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f", ... ({len(names)} in all)" if len(names) > limit else "")


# -- writing -----------------------------------------------------------------------


def ensure_run(run_dir: str | os.PathLike[str], workers: int, tf_version: str) -> str:
    """Create the run directory and its run.json if missing; returns run.json's path."""
    run_dir = os.fspath(run_dir)
    os.makedirs(run_dir, exist_ok=True)
    path = os.path.join(run_dir, RUN_FILE)
    if not os.path.exists(path):
        run = {"run": os.path.basename(os.path.normpath(run_dir)), "created": time.time(),
               "workers": int(workers), "tf_version": str(tf_version)}
        write_json_atomic(path, run,
                           temp=os.path.join(run_dir, f"{TEMP_PREFIX}{RUN_FILE}-{_nonce()}"))
    return path


def prepare_temp(run_dir: str | os.PathLike[str], epoch: int, nonce: str) -> str:
    """Create and return `<run_dir>/.tmp-ckpt-NNNNNN-<nonce>` for a writer to fill."""
    nonce = str(nonce)
    if not nonce or os.sep in nonce or (os.altsep and os.altsep in nonce) or nonce in (".", ".."):
        raise ValueError(_invalid("nonce", nonce, "a non-empty string without path separators"))
    run_dir = os.fspath(run_dir)
    os.makedirs(run_dir, exist_ok=True)
    path = os.path.join(run_dir, f"{TEMP_PREFIX}{checkpoint_name(epoch)}-{nonce}")
    os.mkdir(path)          # fails if it exists: two writers must never share a directory
    return path


def write_meta(directory: str | os.PathLike[str], meta: dict[str, Any]) -> str:
    """Write meta.json atomically (meta.json.tmp, then os.replace); returns its path."""
    if not isinstance(meta, dict):
        raise ValueError(_invalid("meta", meta, "a dict"))
    epoch = meta.get("epoch")
    if isinstance(epoch, bool) or not isinstance(epoch, int):
        raise ValueError(f"meta has no integer \"epoch\" (got {epoch!r}): "
                         "the checkpoint would not be recognised as complete")
    path = os.path.join(os.fspath(directory), META_FILE)
    write_json_atomic(path, meta, temp=path + ".tmp")
    return path


def commit(temp_dir: str | os.PathLike[str], run_dir: str | os.PathLike[str], epoch: int) -> str:
    """Rename a filled temp directory to `<run_dir>/ckpt-NNNNNN`; returns the final path.

    An existing checkpoint of the same epoch (e.g. re-trained after a restart) is
    moved aside, replaced, then removed: a reader sees the old or the new one, never a mix.
    """
    temp_dir, run_dir = os.fspath(temp_dir), os.fspath(run_dir)
    final = os.path.join(run_dir, checkpoint_name(epoch))
    meta, why = _load_meta(temp_dir)
    if meta is None:
        raise ValueError(f"cannot commit {temp_dir}: {why} (call write_meta last, then commit)")
    if meta["epoch"] != epoch:
        raise ValueError(f"cannot commit {temp_dir} as {checkpoint_name(epoch)}: "
                         f"its {META_FILE} says epoch {meta['epoch']}")
    if os.path.realpath(os.path.dirname(os.path.normpath(temp_dir))) != os.path.realpath(run_dir):
        raise ValueError(f"cannot commit {temp_dir}: it must be inside {run_dir} "
                         "(make it with prepare_temp) so that the rename is atomic")
    try:
        _rename_no_replace(temp_dir, final)
    except OSError as error:
        if error.errno not in (errno.EEXIST, errno.ENOTEMPTY):
            raise
        old = os.path.join(run_dir, f"{TEMP_PREFIX}old-{checkpoint_name(epoch)}-{_nonce()}")
        os.rename(final, old)
        try:
            os.rename(temp_dir, final)
        except OSError:
            os.rename(old, final)          # put the previous checkpoint back
            raise
        shutil.rmtree(old, ignore_errors=True)
    _fsync_directory(run_dir)
    return final


def clean_temp(run_dir: str | os.PathLike[str]) -> int:
    """Remove `.tmp-*` debris of a run; returns how many entries went.

    Call it when no worker is writing (it would remove a checkpoint being written).
    """
    run_dir = os.fspath(run_dir)
    try:
        names = os.listdir(run_dir)
    except (FileNotFoundError, NotADirectoryError):
        return 0
    removed = 0
    for name in names:
        if not name.startswith(TEMP_PREFIX):
            continue
        path = os.path.join(run_dir, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        removed += not os.path.lexists(path)
    return removed


def delete_checkpoint(info: CheckpointInfo | str | os.PathLike[str]) -> None:
    """Remove one complete checkpoint (refuses anything else)."""
    path = info.path if isinstance(info, CheckpointInfo) else os.fspath(info)
    checked, why = _read_checkpoint(path)
    if checked is None:
        raise ValueError(f"refusing to delete {path}: it is not a complete checkpoint ({why})")
    # Out of the catalog in one rename, so no reader ever sees a half-deleted checkpoint.
    parent = os.path.dirname(os.path.normpath(path))
    doomed = os.path.join(parent, f"{TEMP_PREFIX}deleted-{checked.name}-{_nonce()}")
    os.rename(path, doomed)
    shutil.rmtree(doomed, ignore_errors=True)


# -- retention ---------------------------------------------------------------------


def monitor_mode(monitor: str) -> str:
    """"max" if a larger `monitor` is better, else "min": Keras' ModelCheckpoint(mode="auto").

    As Keras 3 decides for its built-in metrics (their direction, named as Keras names
    them, with or without "val_" and a "_1" suffix for a second instance), and as
    tf-keras decides by name: "acc" in it or it starts with "fmeasure". Anything else
    (losses, errors, unknown names) is smaller-is-better.
    """
    name = re.sub(r"_\d+$", "", monitor.removeprefix("val_"))
    if name in _LARGER_IS_BETTER or "acc" in monitor or monitor.startswith("fmeasure"):
        return "max"
    return "min"


def select_to_delete(checkpoints: Iterable[CheckpointInfo], *, keep_last: int | None = None,
                     keep_best: int | None = None, monitor: str = "val_loss",
                     mode: str = "auto") -> list[CheckpointInfo]:
    """The checkpoints a retention policy drops, oldest first.

    Keeps the union of the last `keep_last` and the best `keep_best` by `monitor`
    (falling back to "loss", then to recency, when no checkpoint has it), the best
    being the smallest or largest as `mode` says ("auto": monitor_mode); the newest
    is always kept; None sets no limit, and both None keep everything.
    """
    for name, value in (("keep_last", keep_last), ("keep_best", keep_best)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 1):
            raise ValueError(_invalid(name, value, "an integer >= 1 or None"))
    if mode not in _MODES:
        raise ValueError(_invalid("mode", mode, "'auto', 'min' or 'max'"))
    if not isinstance(monitor, str) or not monitor:
        raise ValueError(_invalid("monitor", monitor, "a metric name such as 'val_loss'"))

    ordered = sorted(checkpoints, key=lambda info: (info.epoch, info.name))
    if not ordered or (keep_last is None and keep_best is None):
        return []
    keep = {ordered[-1].path}
    if keep_last is not None:
        keep.update(info.path for info in ordered[-keep_last:])
    if keep_best is not None:
        metric = next((m for m in (monitor, "loss")
                       if any(_has(info, m) for info in ordered)), None)
        if metric is None:
            best = ordered[-keep_best:]
        else:
            scored = [info for info in ordered if _has(info, metric)]
            # The fallback, loss, is always smaller-is-better.
            wanted = "min" if metric != monitor else (
                monitor_mode(monitor) if mode == "auto" else mode)
            sign = 1.0 if wanted == "min" else -1.0
            best = sorted(scored,
                          key=lambda info: (sign * info.metrics[metric], -info.epoch))[:keep_best]
        keep.update(info.path for info in best)
    return [info for info in ordered if info.path not in keep]


def metric_series(checkpoints: Iterable[CheckpointInfo],
                  metric: str) -> tuple[list[int], list[float]]:
    """(epochs, values) of `metric` over the checkpoints that have it, by epoch."""
    points = sorted((info.epoch, info.metrics[metric])
                    for info in checkpoints if _has(info, metric))
    return [epoch for epoch, _ in points], [value for _, value in points]


# -- helpers -----------------------------------------------------------------------


def _invalid(name: str, value: Any, expected: str) -> str:
    return f"Invalid value for argument `{name}`. Received: {name}={value!r}. Expected {expected}."


def _has(info: CheckpointInfo, metric: str) -> bool:
    value = info.metrics.get(metric)
    return value is not None and math.isfinite(value)


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _float_or_none(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _json_default(value: Any) -> Any:
    """numpy / TF scalars in metrics become plain numbers."""
    if hasattr(value, "item"):
        return value.item()
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{type(value).__name__} is not JSON serializable") from None


def write_json_atomic(path: str, data: Any, temp: str) -> None:
    """Write `data` as JSON to `temp`, then os.replace it onto `path` (same directory)."""
    with open(temp, "w", encoding="utf-8") as file:
        json.dump(data, file, indent=1, default=_json_default)
        file.write("\n")
        file.flush()
        os.fsync(file.fileno())
    os.replace(temp, path)


def _rename_no_replace(source: str, target: str) -> None:
    """os.rename, but an existing `target` (even an empty directory) raises EEXIST."""
    if os.path.lexists(target):
        raise FileExistsError(errno.EEXIST, "already exists", target)
    os.rename(source, target)


def _fsync_directory(path: str) -> None:
    """Make a rename durable where the platform allows it (best effort)."""
    try:
        descriptor = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


def _nonce() -> str:
    return uuid.uuid4().hex[:12]
