"""What every Keras fit/evaluate in a %%tfdist cell gets, with no change to the user's code.

`Model.fit` and `Model.evaluate` are wrapped once per worker. Before each cell
the client says what the cell's calls should get (CellOptions): reporting to
the dashboard (and Keras' own progress bar off, unless the call chose
`verbose`), checkpoints, a BackupAndRestore for automatic resumption, a
checkpoint to resume from, a TensorBoard callback. Any TensorBoard callback
keeps the chief's logs only (tensorboard_logs.py). After each fit the worker
records what state it ended with (fit_state.py); when a cell is replayed
(FitState.replay), each fit gives that state back instead of training again.
"""

from __future__ import annotations

import functools
import inspect
import os

from ..run_options import CellOptions, FitState
from . import checkpointing, fit_state, tensorboard_logs
from .reporting import EventPublisher

_cell: dict = {"options": CellOptions(), "state": FitState(), "fits": 0, "replayed": 0,
               "records": []}
_worker: dict = {"publisher": None, "rank": 0, "is_chief": True, "world_size": 1, "depth": 0,
                 "last_fit": (None, None, None)}


def configure(options: CellOptions, state: FitState) -> None:
    """Called before each cell with what the cell's calls get."""
    if not isinstance(options, CellOptions) or not isinstance(state, FitState):
        raise TypeError(f"configure() takes CellOptions and FitState, got "
                        f"{type(options).__name__} and {type(state).__name__}")
    _cell.update(options=options, state=state, fits=0, replayed=0, records=[])


def last_fit() -> tuple:
    """(model, x, batch_size) of the last fit() a cell ran on this worker (diagnose.py)."""
    return _worker["last_fit"]


def fit_records() -> list[dict]:
    """What each fit of the cell that just ran ended with (see fit_state.py)."""
    return list(_cell["records"])


def install(publisher: EventPublisher, *, rank: int, is_chief: bool, world_size: int) -> None:
    import tensorflow as tf

    _worker.update(publisher=publisher, rank=rank, is_chief=is_chief, world_size=world_size)
    model = tf.keras.Model
    if getattr(model.fit, "_tfmw_wrapped", False):
        return
    model.fit = _wrapped(model.fit, training=True)
    model.evaluate = _wrapped(model.evaluate, training=False)


def _positions(method) -> dict[str, int]:
    """Where each argument sits among the positional arguments after `self`."""
    names = list(inspect.signature(method).parameters)[1:]
    return {name: index for index, name in enumerate(names)}


def _wrapped(method, *, training: bool):
    positions = _positions(method)

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        # fit() validates by calling evaluate(): that inner call gets nothing more.
        outermost = _worker["depth"] == 0
        recording = outermost and training and _cell["state"].state_dir is not None
        if outermost and training:
            x, y = _argument("x", args, kwargs, positions), _argument("y", args, kwargs,
                                                                        positions)
            _worker["last_fit"] = (self, x if y is None else (x, y),
                                   _argument("batch_size", args, kwargs, positions))
        if outermost and training and _cell["state"].replay is not None:
            record = _next_replay_record()
            if record is not None:
                return fit_state.replay_fit(self, record, rank=_worker["rank"])
        extra = []
        if outermost and len(args) <= positions["callbacks"]:  # else: positional callbacks
            extra = _extra_callbacks(self, kwargs, args, positions, training)
            if extra:
                kwargs["callbacks"] = list(kwargs.get("callbacks") or []) + extra
        _worker["depth"] += 1
        try:
            if outermost:
                with tensorboard_logs.chief_only_logs(_callbacks(args, kwargs, positions),
                                                      is_chief=_worker["is_chief"]):
                    result = method(self, *args, **kwargs)
            else:
                result = method(self, *args, **kwargs)
        except BaseException:
            if recording:
                _cell["records"].append(fit_state.failed_fit_record())
            raise
        finally:
            _worker["depth"] -= 1
        if recording:
            _record_fit(self, result, extra)
        return result

    wrapper._tfmw_wrapped = True
    return wrapper


def _next_replay_record() -> dict | None:
    """The next fit's record, or None to run it for real (no state was kept)."""
    index = _cell["replayed"]
    _cell["replayed"] += 1
    records = _cell["state"].replay
    record = records[index] if index < len(records) else None
    return record if record is not None and record.get("source") else None


def _record_fit(model, history, callbacks: list) -> None:
    saver = next((c for c in callbacks if isinstance(c, checkpointing.saver_class())), None)
    state = _cell["state"]
    _cell["records"].append(fit_state.record_after_fit(
        model, history, state_dir=state.state_dir, cell_id=state.cell_id,
        index=len(_cell["records"]) + 1, rank=_worker["rank"],
        policy=_cell["options"].checkpoint,
        last_saved_epoch=saver.last_saved_epoch if saver is not None else None))


def _argument(name: str, args: tuple, kwargs: dict, positions: dict, default=None):
    if name in kwargs:
        return kwargs[name]
    index = positions.get(name)
    return args[index] if index is not None and index < len(args) else default


def _callbacks(args: tuple, kwargs: dict, positions: dict) -> list:
    return list(_argument("callbacks", args, kwargs, positions) or [])


def _extra_callbacks(model, kwargs: dict, args: tuple, positions: dict, training: bool) -> list:
    if getattr(model, "_distribute_reduction_method", "unset") is None:
        # tf-keras' "auto" sums the per-batch logs over replicas, though each replica
        # already holds the synchronized metric: batch logs (the progress bar, user
        # callbacks, the dashboard) would read N times too high. "first" is tf-keras'
        # own choice for synchronized values.
        model.distribute_reduction_method = "first"
    options = _cell["options"]
    extra = []
    if options.report and _worker["publisher"] is not None:
        from .keras_reporting import KerasReportingCallback  # imports TensorFlow

        extra.append(KerasReportingCallback(
            _worker["publisher"], samples_per_step=_samples_per_step(args, kwargs, positions)))
        user_chose_verbose = "verbose" in kwargs or len(args) > positions["verbose"]
        if options.quiet_progress and not user_chose_verbose:
            kwargs["verbose"] = 0
    if not training:
        return extra
    _cell["fits"] += 1
    if options.resume_from and _cell["fits"] == 1:
        _resume(model, options.resume_from, kwargs, args, positions)
    import tensorflow as tf

    if options.tensorboard and not any(isinstance(c, tf.keras.callbacks.TensorBoard)
                                       for c in _callbacks(args, kwargs, positions)):
        extra.append(tf.keras.callbacks.TensorBoard(log_dir=options.tensorboard))
    if options.backup is not None:
        extra.append(tf.keras.callbacks.BackupAndRestore(
            os.path.join(options.backup.directory, f"fit-{_cell['fits']}"),
            save_freq=options.backup.save_freq, delete_checkpoint=True))
        extra.append(_resume_notice())
    if options.checkpoint is not None:
        extra.append(checkpointing.saver_class()(
            policy=options.checkpoint, rank=_worker["rank"], is_chief=_worker["is_chief"],
            world_size=_worker["world_size"]))
    return extra


def _samples_per_step(args: tuple, kwargs: dict, positions: dict) -> int | None:
    """Samples this worker consumes per step: the global batch split over the workers.

    For arrays the call's `batch_size` (Keras' default 32); for a tf.data
    pipeline its batch size when the pipeline shows one; else None (the summary
    then shows no samples/s).
    """
    data = _argument("x", args, kwargs, positions)
    batch = _argument("batch_size", args, kwargs, positions)
    if batch is None and hasattr(data, "shape"):
        batch = 32
    if batch is None:
        batch = _dataset_batch_size(data)
    if not batch:
        return None
    return max(1, int(batch) // _worker["world_size"])


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
    meta = checkpointing.restore(model, path)
    if "initial_epoch" not in kwargs and len(args) <= positions["initial_epoch"]:
        kwargs["initial_epoch"] = meta["epoch"]
    if _worker["is_chief"]:
        print(f"resumed from {os.path.basename(path)}: epoch {meta['epoch']}, "
              f"step {meta.get('step')}")   # for the record, not a warning: stdout


def _resume_notice():
    """Says, on the chief, where BackupAndRestore picked training up again."""
    import tensorflow as tf

    class ResumeNotice(tf.keras.callbacks.Callback):
        _said = False

        def on_epoch_begin(self, epoch, logs=None):
            if self._said:
                return
            self._said = True
            step = int(self.model.optimizer.iterations.numpy())
            if step and _worker["is_chief"]:
                print(f"resumed from the automatic backup: epoch {epoch + 1}, "
                      f"step {step}")

    return ResumeNotice()
