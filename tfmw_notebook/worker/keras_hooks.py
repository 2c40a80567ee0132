"""What every Keras fit/evaluate in a %%tfdist cell gets, with no change to the user's code.

`Model.fit` and `Model.evaluate` are wrapped once per worker. Before each cell
the client says what the cell's calls should get: reporting to the dashboard
(and Keras' own progress bar off, unless the call chose `verbose`),
checkpoints, a BackupAndRestore for automatic resumption, or a checkpoint to
resume from. After each fit the worker records what state it ended with
(fit_state.py); when a cell is replayed, each fit gives that state back
instead of training again.
"""

from __future__ import annotations

import functools
import os
import sys

from . import checkpointing, fit_state
from .reporting import EventPublisher, make_keras_callback

# "state_dir": where end-of-fit snapshots go (None: record nothing); "cell_id" names
# them; "replay": the records of the cell's fits when it ran first (the cell is
# being replayed: each fit restores its record instead of training).
_DEFAULTS = {"report": False, "quiet_progress": False, "checkpoint": None, "backup": None,
             "resume_from": None, "state_dir": None, "cell_id": "cell", "replay": None}
_cell: dict = dict(_DEFAULTS, fits=0, replayed=0, records=[])
_worker: dict = {"publisher": None, "rank": 0, "is_chief": True, "depth": 0}

# Positions of `verbose`, `callbacks` and `initial_epoch` among the positional
# arguments after `self`.
_FIT_POSITIONS = {"verbose": 4, "callbacks": 5, "initial_epoch": 10}
_EVALUATE_POSITIONS = {"verbose": 3, "callbacks": 6}


def configure(**options) -> None:
    """Called before each cell with the cell's options (see _DEFAULTS)."""
    unknown = set(options) - set(_DEFAULTS)
    if unknown:
        raise TypeError(f"unknown cell options: {sorted(unknown)}")
    _cell.clear()
    _cell.update(_DEFAULTS, **options)
    _cell["fits"] = 0
    _cell["replayed"] = 0
    _cell["records"] = []


def fit_records() -> list[dict]:
    """What each fit of the cell that just ran ended with (see fit_state.py)."""
    return list(_cell["records"])


def install(publisher: EventPublisher, *, rank: int, is_chief: bool) -> None:
    import tensorflow as tf

    _worker.update(publisher=publisher, rank=rank, is_chief=is_chief)
    model = tf.keras.Model
    if getattr(model.fit, "_tfmw_wrapped", False):
        return
    model.fit = _wrapped(model.fit, _FIT_POSITIONS, training=True)
    model.evaluate = _wrapped(model.evaluate, _EVALUATE_POSITIONS, training=False)


def _wrapped(method, positions: dict[str, int], *, training: bool):
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        # fit() validates by calling evaluate(): that inner call gets nothing more.
        outermost = _worker["depth"] == 0
        if outermost and training and _cell["replay"] is not None:
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
            result = method(self, *args, **kwargs)
        except BaseException:
            if outermost and training and _cell["state_dir"]:
                _cell["records"].append(fit_state.failed_fit_record())
            raise
        finally:
            _worker["depth"] -= 1
        if outermost and training and _cell["state_dir"]:
            _record_fit(self, result, extra)
        return result

    wrapper._tfmw_wrapped = True
    return wrapper


def _next_replay_record() -> dict | None:
    """The next fit's record, or None to run it for real (no state was kept)."""
    index = _cell["replayed"]
    _cell["replayed"] += 1
    records = _cell["replay"]
    record = records[index] if index < len(records) else None
    return record if record is not None and record.get("source") else None


def _record_fit(model, history, callbacks: list) -> None:
    saver = next((c for c in callbacks if hasattr(c, "last_saved_epoch")), None)
    _cell["records"].append(fit_state.record_after_fit(
        model, history, state_dir=_cell["state_dir"], cell_id=_cell["cell_id"],
        index=len(_cell["records"]) + 1, rank=_worker["rank"],
        checkpoint_settings=_cell["checkpoint"],
        last_saved_epoch=saver.last_saved_epoch if saver is not None else None))


def _extra_callbacks(model, kwargs: dict, args: tuple, positions: dict, training: bool) -> list:
    if getattr(model, "_distribute_reduction_method", "unset") is None:
        # tf-keras' "auto" sums the per-batch logs over replicas, though each replica
        # already holds the synchronized metric: batch logs (the progress bar, user
        # callbacks, the dashboard) would read N times too high. "first" is tf-keras'
        # own choice for synchronized values.
        model.distribute_reduction_method = "first"
    extra = []
    if _cell["report"] and _worker["publisher"] is not None:
        extra.append(make_keras_callback(_worker["publisher"]))
        user_chose_verbose = "verbose" in kwargs or len(args) > positions["verbose"]
        if _cell["quiet_progress"] and not user_chose_verbose:
            kwargs["verbose"] = 0
    if not training:
        return extra
    _cell["fits"] += 1
    if _cell["resume_from"] and _cell["fits"] == 1:
        _resume(model, _cell["resume_from"], kwargs, args, positions)
    if _cell["backup"]:
        import tensorflow as tf

        backup = _cell["backup"]
        extra.append(tf.keras.callbacks.BackupAndRestore(
            os.path.join(backup["dir"], f"fit-{_cell['fits']}"),
            save_freq=backup.get("save_freq", "epoch"), delete_checkpoint=True))
        extra.append(_resume_notice())
    if _cell["checkpoint"]:
        extra.append(checkpointing.make_callback(_cell["checkpoint"], _worker["rank"],
                                                 _worker["is_chief"]))
    return extra


def _resume(model, path: str, kwargs: dict, args: tuple, positions: dict) -> None:
    meta = checkpointing.restore(model, path)
    if "initial_epoch" not in kwargs and len(args) <= positions["initial_epoch"]:
        kwargs["initial_epoch"] = meta["epoch"]
    if _worker["is_chief"]:
        print(f"resumed from {os.path.basename(path)}: epoch {meta['epoch']}, "
              f"step {meta.get('step')}", file=sys.stderr)


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
                      f"step {step}", file=sys.stderr)

    return ResumeNotice()
