"""Run records to an experiment tracker (MLflow), with no tracking code in the cells.

`%tfdist tracking mlflow [URI]` keeps a TrackingSettings; after each run record is written
(`<run_dir>/run.json`), `after_record(settings, record)` logs it as one MLflow run: its
hyperparameters and sweep values as params, each metric per epoch (step = epoch), how it
ended and on what cluster as tags, the cell's source and the newest checkpoint of its
checkpoint directory as artifacts. A tracking server that fails then costs one warning line,
never the cell: the record stays on disk.

The default store is MLflow's own default, `sqlite:///mlflow.db`, made absolute in the
notebook's directory: MLflow 3 refuses its old file store (`./mlruns`) unless told to, and
`mlflow ui` started beside the notebook finds these runs with no option. MLflow is imported
only when tracking is turned on.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TextIO

from ...errors import BadArgument
from ...protocol.checkpoints import CheckpointInfo, list_checkpoints, read_checkpoint

BACKENDS = ("mlflow", "off")
DEFAULT_EXPERIMENT = "tfdist"
DEFAULT_DB = "mlflow.db"
# Per request, while we check or log: a server that is down costs seconds (2 retries after
# 1 and 2 s), not MLflow's default of 7 retries with backoff (minutes of a waiting notebook).
_CHECK_RETRIES, _LOG_RETRIES, _TIMEOUT_S, _BACKOFF = 0, 2, 10, 1
_STATUS = {"completed": "FINISHED", "restored": "FINISHED", "pruned": "FINISHED",
           "failed": "FAILED", "interrupted": "KILLED"}
_NOT_FINITE = ("nan", "inf", "-inf")
_NAME_CHARACTERS = re.compile(r"[^\w./\- ]")   # what MLflow accepts in a param/metric name
_TAG_LIMIT = 5000
_PARAM_LIMIT = 6000                             # MLflow 2 and 3
_LINE_LIMIT = 200
# MLflow's limits per log_batch call.
_BATCH = {"metrics": 1000, "params": 100, "tags": 100}


@dataclass(frozen=True)
class TrackingSettings:
    """What `%tfdist tracking` chose for the following cells: backend None is off."""

    backend: str | None = None
    uri: str | None = None
    experiment: str = DEFAULT_EXPERIMENT

    @property
    def enabled(self) -> bool:
        return self.backend is not None

    def describe(self) -> str:
        if not self.enabled:
            return "tracking off"
        return f"tracking to {self.backend} at {self.uri} (experiment {self.experiment!r})"


def default_uri(directory: str | None = None) -> str:
    """MLflow's default store, `sqlite:///mlflow.db`, in `directory` (default: here)."""
    return "sqlite:///" + os.path.abspath(os.path.join(directory or os.getcwd(), DEFAULT_DB))


def configure(backend: str, uri: str | None = None,
              experiment: str = DEFAULT_EXPERIMENT) -> TrackingSettings:
    """Settings for `backend` ("mlflow" or "off"), once its store answers (BadArgument if not)."""
    if backend == "off":
        return TrackingSettings()
    if backend not in BACKENDS:
        raise BadArgument(f"Invalid value for argument `backend`. Received: backend={backend!r}. "
                          f"Expected one of {', '.join(BACKENDS)}.")
    if not experiment or not experiment.strip():
        raise BadArgument("Invalid value for argument `experiment`: an experiment needs a name.")
    settings = TrackingSettings("mlflow", uri or default_uri(), experiment)
    check_reachable(settings.uri or "")
    return settings


def check_reachable(uri: str) -> None:
    """Raise BadArgument, in one line, unless an MLflow store answers at `uri`."""
    mlflow = _mlflow()
    try:
        with _patient(_CHECK_RETRIES):
            mlflow.MlflowClient(tracking_uri=uri).search_experiments(max_results=1)
    except Exception as exc:
        raise BadArgument(f"cannot reach an MLflow tracking store at {uri} ({_first_line(exc)}): "
                          "start the server or fix the URI") from None


def after_record(settings: TrackingSettings | None, record: dict[str, Any], *,
                 out: TextIO | None = None) -> str | None:
    """Log a run record just written to disk, if tracking is on; the MLflow run id, or None.

    Never raises for the tracker's sake: a failure is one line on `out` (stderr)."""
    if settings is None or not settings.enabled:
        return None
    try:
        with _patient(_LOG_RETRIES):
            return log_run(record, settings.uri or default_uri(), settings.experiment)
    except Exception as exc:
        name = record.get("name", "?") if isinstance(record, dict) else "?"
        (out or sys.stderr).write(
            f"tfdist: run {name} was not logged to MLflow at {settings.uri} "
            f"({_first_line(exc)}); its record stays on disk\n")
        return None


def log_run(record: dict[str, Any], uri: str, experiment: str = DEFAULT_EXPERIMENT) -> str:
    """Log one run record (the dict `<run_dir>/run.json` holds) as an MLflow run; its id."""
    if not isinstance(record, dict):
        raise BadArgument(f"Invalid value for argument `record`. Received: "
                          f"{type(record).__name__}. Expected a run record (a dict).")
    client = _mlflow().MlflowClient(tracking_uri=uri)
    now_ms = int(time.time() * 1000)
    wall_time = _number(record.get("wall_time"))
    took_ms = int(wall_time * 1000) if wall_time is not None and math.isfinite(wall_time) else 0
    run = client.create_run(
        _experiment_id(client, experiment), run_name=str(record.get("name") or "run"),
        start_time=now_ms - took_ms, tags=run_tags(record))
    run_id = run.info.run_id
    _log_batches(client, run_id, run_metrics(record, now_ms), run_params(record))
    if record.get("source"):
        client.log_text(run_id, str(record["source"]), "cell.py")
    checkpoint = newest_checkpoint(record.get("checkpoint_dir"))
    if checkpoint is not None:
        client.log_artifacts(run_id, checkpoint.path, f"checkpoint/{checkpoint.name}")
    client.set_terminated(run_id, _STATUS.get(str(record.get("outcome")), "FINISHED"),
                          end_time=now_ms)
    return run_id


def run_params(record: dict[str, Any]) -> dict[str, str]:
    """Hyperparameters (nested dicts flattened with dots) and sweep values, as MLflow params
    (strings, at most MLflow's length). A sweep value wins over a hyperparameter's name."""
    params = _flatten(record.get("hyperparameters") or {})
    params.update(_flatten(record.get("sweep") or {}))
    limit = _param_limit()
    return {_valid_name(key): value[:limit] for key, value in params.items()}


def run_metrics(record: dict[str, Any], timestamp_ms: int) -> list[tuple[str, float, int, int]]:
    """(key, value, timestamp, step) for every metric value (NaN too: a loss that went NaN
    is worth seeing), step being the epoch; wall time and samples/s once, at the last epoch."""
    history = record.get("history") or {}
    epochs = list(record.get("epochs") or [])
    found = []
    for name, values in history.items():
        for index, value in enumerate(values or []):
            step = epochs[index] if index < len(epochs) else index
            number = _number(value)
            if number is not None:
                found.append((_valid_name(str(name)), number, timestamp_ms, int(step)))
    last = epochs[-1] if epochs else 0
    for key, name in (("wall_time", "wall_time_s"), ("samples_per_second", "samples_per_second")):
        number = _number(record.get(key))
        if number is not None:
            found.append((name, number, timestamp_ms, int(last)))
    return found


def run_tags(record: dict[str, Any]) -> dict[str, str]:
    """How the run ended and on what cluster, under `tfdist.`."""
    cluster = record.get("cluster") or {}
    tags = {
        "tfdist.outcome": record.get("outcome"),
        "tfdist.workers": cluster.get("workers"),
        "tfdist.hosts": _joined(cluster.get("hosts")),
        "tfdist.devices": _joined(cluster.get("devices")),
        "tfdist.keras": cluster.get("keras"),
        "tfdist.checkpoint_dir": record.get("checkpoint_dir"),
        "tfdist.sweep": json.dumps(record["sweep"], sort_keys=True, default=str)
        if record.get("sweep") else None,
        "tfdist.error": record.get("error"),
    }
    return {key: str(value)[:_TAG_LIMIT] for key, value in tags.items()
            if value not in (None, "")}


def newest_checkpoint(directory: Any) -> CheckpointInfo | None:
    """The newest complete checkpoint of a run directory (or the directory itself, if it
    is one); None if there is none."""
    if not directory or not isinstance(directory, (str, os.PathLike)):
        return None
    own = read_checkpoint(directory)
    if own is not None:
        return own
    found = list_checkpoints(directory)
    return found[-1] if found else None


def _log_batches(client: Any, run_id: str, metrics: list[tuple[str, float, int, int]],
                 params: dict[str, str]) -> None:
    from mlflow.entities import Metric, Param

    metric_entities = [Metric(key, value, stamp, step) for key, value, stamp, step in metrics]
    param_entities = [Param(key, value) for key, value in params.items()]
    for start in range(0, len(metric_entities), _BATCH["metrics"]):
        client.log_batch(run_id, metrics=metric_entities[start:start + _BATCH["metrics"]])
    for start in range(0, len(param_entities), _BATCH["params"]):
        client.log_batch(run_id, params=param_entities[start:start + _BATCH["params"]])


def _experiment_id(client: Any, name: str) -> str:
    found = client.get_experiment_by_name(name)
    if found is not None:
        return found.experiment_id
    try:
        return client.create_experiment(name)
    except Exception:
        found = client.get_experiment_by_name(name)   # another kernel made it meanwhile
        if found is None:
            raise
        return found.experiment_id


def _flatten(values: dict[str, Any], prefix: str = "") -> dict[str, str]:
    flat: dict[str, str] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(_flatten(value, prefix=name + "."))
        else:
            flat[name] = value if isinstance(value, str) else json.dumps(value, default=str)
    return flat


def _valid_name(name: str) -> str:
    return _NAME_CHARACTERS.sub("_", name) or "_"


def _number(value: Any) -> float | None:
    if isinstance(value, str) and value.lower() in _NOT_FINITE:
        return float(value)   # records keep a NaN or infinite value as text (JSON has none)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _joined(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return ", ".join(str(item) for item in value)
    return value


def _param_limit() -> int:
    """MLflow's longest param value (the installed MLflow's, once it is imported)."""
    validation = sys.modules.get("mlflow.utils.validation")
    return int(getattr(validation, "MAX_PARAM_VAL_LENGTH", _PARAM_LIMIT))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    line = f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
    return line if len(line) <= _LINE_LIMIT else line[:_LINE_LIMIT - 3] + "..."


@contextlib.contextmanager
def _patient(retries: int) -> Iterator[None]:
    """MLflow's HTTP retries and timeout, while inside (read by MLflow at each request)."""
    wanted = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": str(retries),
              "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": str(_BACKOFF),
              "MLFLOW_HTTP_REQUEST_TIMEOUT": str(_TIMEOUT_S)}
    saved = {name: os.environ.get(name) for name in wanted}
    os.environ.update(wanted)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _mlflow() -> Any:
    try:
        import mlflow
    except ImportError:
        raise BadArgument("MLflow is not installed in this kernel's Python: run "
                          "`pip install mlflow`, then turn tracking on again") from None
    return mlflow
