"""What every Keras fit/evaluate in a %%tfdist cell gets, with no change to the user's code.

`Model.fit` and `Model.evaluate` are wrapped once per worker. Before each cell
the client says what the cell's calls should get (CellOptions): reporting to
the dashboard (and Keras' own progress bar off, unless the call chose
`verbose`), checkpoints, a BackupAndRestore for automatic resumption, a
checkpoint to resume from, a TensorBoard callback. Any TensorBoard callback
keeps the chief's logs only (tensorboard_logs.py). After each fit the worker
records what state it ended with (fit_state.py); when a cell is replayed
(FitState.replay), each fit gives that state back instead of training again. A model built
under another strategy (other_strategy_scope.py) trains on its worker alone and gets nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...protocol import records
from ...protocol.run_options import CellOptions, CheckpointPolicy, FitState
from ..common import guarded_patches, import_hooks
from ..corrections import keras_flavour, other_strategy_scope
from ..data import input_release, sharded_fit
from ..experiments import run_facts, trial_report
from ..liveness.reporting import EventPublisher
from ..writes import tensorboard_logs
from . import checkpoint_resume, fit_state, input_orders, input_position
from .keras_callbacks import callback_logic, keras_callbacks
from .optimizer_steps import optimizer_steps


@dataclass
class CellCalls:
    """What the running cell's fit/evaluate calls get, and what its fits ended with.

    Set afresh by `configure` before every cell, so nothing of one cell leaks into the next.
    """

    options: CellOptions = field(default_factory=CellOptions)
    state: FitState = field(default_factory=FitState)
    fits: int = 0          # fit() calls so far: only the first resumes from a checkpoint
    replayed: int = 0      # records of state.replay handed out so far
    records: list[dict[str, Any]] = field(default_factory=list)   # one per fit, failed too
    runs: list[dict[str, Any]] = field(default_factory=list)  # the chief's run records
    policy: CheckpointPolicy | None = None   # the running fit's checkpoints (see fit_policy)


@dataclass
class WorkerRole:
    """Who this worker is (set once, by the bootstrap) and what its calls are doing."""

    publisher: EventPublisher | None = None
    rank: int = 0
    is_chief: bool = True
    world_size: int = 1
    depth: int = 0         # wrapped calls under way: fit() runs evaluate() to validate
    # (model, data, batch_size) of the last outermost fit(), for diagnose.py
    last_fit: tuple[Any, Any, int | None] = (None, None, None)


_cell = CellCalls()
_worker = WorkerRole()

# Marks tf.keras.Model's wrapped methods, so a second install leaves them alone.
_WRAPPED = "_tfmw_wrapped"


def configure(options: CellOptions, state: FitState) -> None:
    """Called before each cell with what the cell's calls get."""
    if not isinstance(options, CellOptions) or not isinstance(state, FitState):
        raise TypeError(f"configure() takes CellOptions and FitState, got "
                        f"{type(options).__name__} and {type(state).__name__}")
    _cell.options, _cell.state = options, state
    _cell.fits, _cell.replayed, _cell.records, _cell.runs = 0, 0, [], []
    _cell.policy = None
    trial_report.reset()


def last_fit() -> tuple[Any, Any, int | None]:
    """(model, x, batch_size) of the last fit() a cell ran on this worker (diagnose.py)."""
    return _worker.last_fit


def fit_records() -> list[dict[str, Any]]:
    """What each fit of the cell that just ran ended with (see fit_state.py)."""
    return list(_cell.records)


def run_records() -> list[dict[str, Any]]:
    """The chief's record of each fit the cell ran (none on the other workers)."""
    return [dict(record) for record in _cell.runs]


def install(publisher: EventPublisher, *, rank: int, is_chief: bool, world_size: int) -> None:
    import tensorflow as tf

    _worker.publisher, _worker.rank = publisher, rank
    _worker.is_chief, _worker.world_size = is_chief, world_size
    _wrap_model_class(tf.keras.Model)
    input_position.install()   # a resumed fit's input goes on where it was
    # Where tf.keras is tf-keras, `import keras` is Keras 3: its models get the same hooks
    # once a cell imports it (importing it here would make every start pay ~1.2 s).
    import_hooks.when_imported("keras", lambda keras: _wrap_model_class(keras.Model))


# The arguments the wrappers find by name; a Keras whose methods lack one is not wrapped.
_READS = {"fit": ("x", "y", "batch_size", "verbose", "callbacks", "shuffle", "initial_epoch"),
          "evaluate": ("x", "batch_size", "verbose", "callbacks"), "predict": ("x", "batch_size")}


def _wrap_model_class(model) -> None:
    """`model.fit`, `evaluate` and `predict` (a Keras' Model class) wrapped once; skipped
    and reported (guarded_patches.py) when they do not take the arguments the wrappers read."""
    guarded_patches.patch(
        "keras_hooks", f"{model.__module__}.Model.fit/evaluate/predict",
        lambda: [guarded_patches.method(model, name, *reads) for name, reads in _READS.items()],
        lambda _: _wrap_methods(model), library=model.__module__.split(".")[0],
        risk="this Keras' fits get no dashboard, automatic checkpoints or backups")


def _wrap_methods(model) -> None:
    if getattr(model.fit, _WRAPPED, False):
        return
    model.fit = _wrapped(model.fit, training=True)
    model.evaluate = _wrapped(model.evaluate, training=False)
    model.predict = _wrapped_predict(model.predict)


def _positions(method) -> dict[str, int]:
    """Where each argument sits among the positional arguments after `self`."""
    names = list(inspect.signature(method).parameters)[1:]
    return {name: index for index, name in enumerate(names)}


def _wrapped(method: Callable[..., Any], *, training: bool) -> Callable[..., Any]:
    positions = _positions(method)

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        # fit() validates by calling evaluate(): that inner call gets nothing more, nor does
        # a model built under another strategy (it trains on this worker alone).
        if _worker.depth or other_strategy_scope.trains_apart(self):
            return _inner_call(method, self, args, kwargs)
        state_dir = _cell.state.state_dir if training else None
        if training:
            _note_fit(self, args, kwargs, positions)
            record = (_next_replay_record(_cell.state.replay)
                      if _cell.state.replay is not None else None)
            if record is not None:
                return fit_state.replay_fit(self, record, rank=_worker.rank,
                                            inputs=_inputs(args, kwargs, positions))
        args, kwargs, extra = _prepared(self, args, kwargs, positions, training)
        result = _outermost_call(method, self, args, kwargs, positions, training, state_dir)
        if state_dir is not None:   # the cluster keeps what this fit ended with
            _record_fit(self, result, extra, state_dir)
        return result

    # A function takes attributes; mypy's view of what functools.wraps returns does not.
    setattr(wrapper, _WRAPPED, True)
    return wrapper


def _inner_call(method: Callable[..., Any], model, args: tuple, kwargs: dict) -> Any:
    _worker.depth += 1
    try:
        return method(model, *args, **kwargs)
    finally:
        _worker.depth -= 1


def _prepared(model, args: tuple, kwargs: dict, positions: dict,
              training: bool) -> tuple[tuple, dict, list]:
    """The outermost call's arguments with this worker's callbacks added (none when the
    call passed its callbacks positionally) and a `--shard`'s rows put in: (args, kwargs,
    the callbacks added)."""
    extra = []
    if len(args) <= positions["callbacks"]:
        extra = _extra_callbacks(model, kwargs, args, positions, training)
        if extra:
            kwargs["callbacks"] = list(kwargs.get("callbacks") or []) + extra
    if sharded_fit.applies(_argument("x", args, kwargs, positions)):
        args, kwargs = (), _keywords(args, kwargs, positions)   # the workers' own rows
        sharded_fit.rewrite(kwargs, training=training)
    return args, kwargs, extra


def _outermost_call(method: Callable[..., Any], model, args: tuple, kwargs: dict,
                    positions: dict, training: bool, state_dir: str | None) -> Any:
    _worker.depth += 1
    try:
        with _around_outermost(model, args, kwargs, positions, training):
            result = method(model, *args, **kwargs)
    except BaseException:
        if state_dir is not None:
            _cell.records.append(fit_state.failed_fit_record())
        if training:
            _fit_ended(raised=True)
        raise
    finally:
        _worker.depth -= 1
    if training:
        _fit_ended(raised=False)
    return result


@contextlib.contextmanager
def _around_outermost(model, args: tuple, kwargs: dict, positions: dict, training: bool):
    """What an outermost fit/evaluate runs inside: its input freed after the call, off the
    cell's path; only the chief's TensorBoard logs; a resumed fit's input put back where
    it was (input_position.py, from where the call starts, after --resume-from set it)."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(input_release.deferred())
        stack.enter_context(tensorboard_logs.chief_only_logs(
            _callbacks(args, kwargs, positions), is_chief=_worker.is_chief))
        if training:   # a SIGTERM after the fit's last agreed step is kept to the cell's end
            stack.enter_context(input_position.watching(
                model, _argument("initial_epoch", args, kwargs, positions),
                _argument("x", args, kwargs, positions)))
            stack.enter_context(input_orders.counting(model, _inputs(args, kwargs, positions)))
        yield


def _inputs(args: tuple, kwargs: dict, positions: dict) -> dict[str, Any]:
    """A fit's inputs whose shuffle orders a replay gives back (input_orders.py)."""
    return {name: _argument(name, args, kwargs, positions) for name in ("x", "validation_data")}


def _wrapped_predict(method: Callable[..., Any]) -> Callable[..., Any]:
    """`predict` of a worker's own rows (`--shard`) runs on that worker alone."""
    positions = _positions(method)

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        x = _argument("x", args, kwargs, positions)
        if _worker.depth == 0 and not other_strategy_scope.trains_apart(self) \
                and sharded_fit.applies(x):
            own = sharded_fit.own_predictions(
                self, x, _argument("batch_size", args, kwargs, positions))
            if own is not None:
                return own
        return method(self, *args, **kwargs)

    setattr(wrapper, _WRAPPED, True)
    return wrapper


def _note_fit(model, args: tuple, kwargs: dict, positions: dict) -> None:
    """Keep what diagnose.py reads of the last fit; quiet Keras' shuffle warning."""
    x, y = _argument("x", args, kwargs, positions), _argument("y", args, kwargs, positions)
    _worker.last_fit = (model, x if y is None else (x, y),
                        _argument("batch_size", args, kwargs, positions))
    _no_default_shuffle_warning(x, args, kwargs, positions)


def _no_default_shuffle_warning(x, args: tuple, kwargs: dict, positions: dict) -> None:
    """Keras 3 warns "`shuffle=True` was passed, but will be ignored" at every fit on a
    tf.data pipeline, though the call never passed it (it is fit's default). Saying
    shuffle=False changes nothing for a pipeline and keeps that line out of the cell."""
    if "shuffle" in kwargs or "shuffle" not in positions or len(args) > positions["shuffle"]:
        return
    if type(x).__module__.startswith("tensorflow.python.data"):
        kwargs["shuffle"] = False


def _next_replay_record(records: tuple[dict[str, Any], ...]) -> dict[str, Any] | None:
    """The next fit's record, or None to run it for real (no state was kept)."""
    index = _cell.replayed
    _cell.replayed += 1
    record = records[index] if index < len(records) else None
    return record if record is not None and record.get("source") else None


def _record_fit(model, history, callbacks: list, state_dir: str) -> None:
    saver_class = callback_logic().checkpoint_saver
    saver = next((c for c in callbacks if isinstance(c, saver_class)), None)
    _cell.records.append(fit_state.record_after_fit(
        model, history, state_dir=state_dir, cell_id=_cell.state.cell_id,
        index=len(_cell.records) + 1, rank=_worker.rank,
        policy=_cell.policy,
        last_saved_epoch=saver.last_saved_epoch if saver is not None else None))


def _argument(name: str, args: tuple, kwargs: dict, positions: dict, default=None):
    if name in kwargs:
        return kwargs[name]
    index = positions.get(name)
    return args[index] if index is not None and index < len(args) else default


def _keywords(args: tuple, kwargs: dict, positions: dict) -> dict:
    """The call's arguments, every one by name."""
    names = sorted(positions, key=positions.__getitem__)
    return {**dict(zip(names, args)), **kwargs}


def _callbacks(args: tuple, kwargs: dict, positions: dict) -> list:
    return list(_argument("callbacks", args, kwargs, positions) or [])


def _extra_callbacks(model, kwargs: dict, args: tuple, positions: dict, training: bool) -> list:
    if getattr(model, "_distribute_reduction_method", "unset") is None:
        # tf-keras' "auto" sums the per-batch logs over replicas, though each replica
        # already holds the synchronized metric: batch logs (the progress bar, user
        # callbacks, the dashboard) would read N times too high. "first" is tf-keras'
        # own choice for synchronized values.
        model.distribute_reduction_method = "first"
    options = _cell.options
    keras = keras_flavour.keras_package(model)
    ours = keras_callbacks(keras)
    extra = _reporting(ours, kwargs, args, positions)
    if not training:
        return extra
    _cell.fits += 1
    _cell.policy = fit_policy(options.checkpoint, _cell.fits)
    if _worker.is_chief:
        extra.append(_run_recorder(ours.run_recorder, args, kwargs, positions))
    if options.resume_from and _cell.fits == 1:
        _resume(model, options.resume_from, kwargs, args, positions)
    if options.tensorboard and not any(isinstance(c, tensorboard_logs.tensorboard_classes())
                                       for c in _callbacks(args, kwargs, positions)):
        extra.append(keras.callbacks.TensorBoard(log_dir=options.tensorboard))
    if options.backup is not None:
        extra += _backup_callbacks(model, ours, options.backup)
    if _cell.policy is not None:
        extra.append(ours.checkpoint_saver(
            policy=_cell.policy, rank=_worker.rank, is_chief=_worker.is_chief,
            world_size=_worker.world_size))
    if options.trial is not None:   # a sweep's trial: its metric per epoch, median pruning
        extra.append(ours.trial_monitor(options.trial, world_size=_worker.world_size))
    return extra


def _reporting(ours, kwargs: dict, args: tuple, positions: dict) -> list:
    """The dashboard's callback, with Keras' own progress bar quieted unless asked for."""
    if not _cell.options.report or _worker.publisher is None:
        return []
    user_chose_verbose = "verbose" in kwargs or len(args) > positions["verbose"]
    if _cell.options.quiet_progress and not user_chose_verbose:
        kwargs["verbose"] = 0
    return [ours.reporting(_worker.publisher,
                           samples_per_step=_samples_per_step(args, kwargs, positions))]


def _backup_callbacks(model, ours, options) -> list:
    """The automatic backup, then what puts a resumed fit at its step and says so, and
    (with `--grace`) the save a SIGTERM asks for at the next step every worker agrees on."""
    backup = _backup(model, options)
    extra = [backup, ours.resume_point(),
             ours.resume_notice(is_chief=_worker.is_chief, start_step=optimizer_steps(model))]
    if options.grace is not None:
        extra.append(ours.preemption_save(backup, grace=options.grace, rank=_worker.rank,
                                          world_size=_worker.world_size))
    return extra


def _backup(model, backup):
    """The automatic BackupAndRestore of this fit (`--max-restarts`), of the model's Keras."""
    # Keras 3 writes its backup in place: a worker stopped mid-write (a restart stops them
    # all) left one it could not read (measured); it then falls back to the previous one,
    # which it keeps with double_checkpoint.
    keras3 = {"double_checkpoint": True} if keras_flavour.keras_of(model) == 3 else {}
    return keras_flavour.keras_package(model).callbacks.BackupAndRestore(
        os.path.join(backup.directory, f"fit-{_cell.fits}"), save_freq=backup.save_freq,
        delete_checkpoint=True, **keras3)


def _samples_per_step(args: tuple, kwargs: dict, positions: dict) -> int | None:
    """Samples this worker consumes per step: the global batch split over the workers
    (None when the batch size is not known: the summary then shows no samples/s)."""
    batch = _global_batch(args, kwargs, positions)
    return max(1, batch // _worker.world_size) if batch else None


def _global_batch(args: tuple, kwargs: dict, positions: dict) -> int | None:
    """For arrays the call's `batch_size` (Keras' default 32); for a tf.data pipeline
    its batch size when the pipeline shows one; else None."""
    data = _argument("x", args, kwargs, positions)
    batch = _argument("batch_size", args, kwargs, positions)
    if batch is None and hasattr(data, "shape"):
        batch = 32
    if batch is None:
        batch = _dataset_batch_size(data)
    return int(batch) if batch else None


def fit_policy(policy: CheckpointPolicy | None, index: int) -> CheckpointPolicy | None:
    """Fit number `index` of a cell checkpoints into a run directory of its own."""
    if policy is None or index <= 1:
        return policy
    return dataclasses.replace(policy, run_dir=records.fit_run_dir(policy.run_dir, index))


def _run_recorder(recorder_class, args: tuple, kwargs: dict, positions: dict):
    """The chief's record of this fit, filled by a callback and published as it goes."""
    values = {name: _argument(name, args, kwargs, positions) for name in run_facts.FIT_ARGUMENTS
              if name in positions}
    validation = (_argument("validation_data", args, kwargs, positions) is not None
                  or bool(values.get("validation_split")))
    record: dict[str, Any] = {
        "fit": _cell.fits, "finished": False, "history": {}, "epochs": [],
        "hyperparameters": run_facts.fit_arguments(
            values, validation=validation,
            global_batch=_global_batch(args, kwargs, positions))}
    _cell.runs.append(record)
    return recorder_class(record, lambda data: _publish({records.run_key(record["fit"]): data}))


def _fit_ended(*, raised: bool) -> None:
    """Every rank says when its fit raised; the chief marks its record finished."""
    if raised:
        _publish({records.raised_key(_cell.fits): True})
    elif _worker.is_chief and _cell.runs and _cell.runs[-1]["fit"] == _cell.fits:
        _cell.runs[-1]["finished"] = True
        _publish({records.run_key(_cell.fits): _cell.runs[-1]})


def _publish(data: dict[str, Any]) -> None:
    """Publish through the engine (outside one, as in unit tests, nothing is sent)."""
    try:
        from ..liveness.heartbeat import engine_publish

        engine_publish()(data)
    except Exception:
        pass


def _dataset_batch_size(dataset) -> int | None:
    """The batch size of the nearest `.batch()` in a tf.data pipeline, if it is fixed."""
    seen = 0
    while dataset is not None and seen < 32:  # a pipeline is a short chain of datasets
        size = getattr(dataset, "_batch_size", None)
        if size is not None:
            try:
                return int(size)
            except (TypeError, ValueError):
                return None
        dataset = getattr(dataset, "_input_dataset", None)
        seen += 1
    return None


def _resume(model, path: str, kwargs: dict, args: tuple, positions: dict) -> None:
    """--resume-from: the checkpoint restored, the fit and its input put where the fit that
    wrote it was (checkpoint_resume.py)."""
    positional = len(args) > positions["initial_epoch"]
    kwargs["callbacks"] = list(kwargs.get("callbacks") or []) + checkpoint_resume.resume(
        model, path, kwargs, asked_epoch=_argument("initial_epoch", args, kwargs, positions),
        positional=positional, is_chief=_worker.is_chief)
