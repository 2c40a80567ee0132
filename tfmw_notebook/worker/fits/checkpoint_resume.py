"""A fit continued from an automatic checkpoint (`%%tfdist --resume-from latest|PATH`).

The checkpoint is restored into the model before the cell's first fit() runs; the fit
then goes on as the fit that wrote it would have, had it run on: at the checkpoint's
epoch, its input where that fit had it. It is put there as a fit resumed from its
automatic backup is (input_position.py): the fit is called from where the checkpoint's
run began (the checkpoint records its first epoch and its optimizer's step then), so its
input pipeline is the undisturbed fit's, and the restored optimizer's step says how far
that run went. A call that asks for another first epoch than the checkpoint's keeps it,
its input from the first batch; the resume line says so.
"""

from __future__ import annotations

import os
from typing import Any

from ..corrections import keras_flavour
from ..writes import checkpointing
from . import input_position
from .keras_callbacks import keras_callbacks
from .optimizer_steps import optimizer_steps


def resume(model: Any, path: str, kwargs: dict, *, asked_epoch: Any, positional: bool,
           is_chief: bool) -> list:
    """Restore checkpoint `path` into `model` and set the fit's `initial_epoch` in `kwargs`
    (`asked_epoch`: the call's own, None when it gave none; `positional`: given by
    position, so kept); returns the callbacks that put the fit at the checkpoint's step
    (Keras 3) and say where it resumed (the chief)."""
    meta = checkpointing.restore(model, path)
    epochs = int(meta["epoch"])
    head = f"resumed from {os.path.basename(path)}: epoch {epochs}, step {meta.get('step')}"
    keras = keras_flavour.keras_package(model)
    if asked_epoch is not None and (asked_epoch != epochs or positional):
        head += (f"; its input starts from its first batch (the fit asked for "
                 f"initial_epoch={asked_epoch}, the checkpoint is at epoch {epochs})")
        return [_notice(keras, head, model, None, is_chief=is_chief)]
    start = meta.get("start") or {}
    first = int(start.get("epoch", 0))
    kwargs["initial_epoch"] = first   # the undisturbed fit's input, then put at the step
    input_position.resuming(first, _start_step(model, meta, start), epochs - first)
    return [keras_callbacks(keras).resume_point(),
            _notice(keras, head, model, meta.get("step"), is_chief=is_chief)]


def _notice(keras: Any, head: str, model: Any, step: int | None, *, is_chief: bool):
    """A callback that prints `head` and where the input was put back (input_position.py)
    on the chief, once: at the fit's first batch (Keras 3 reads an epoch's input after
    its on_epoch_begin), or at its end when the checkpoint's fit had no epoch left. Not
    when the optimizer is past the checkpoint's `step` by then: a backup of the resumed
    fit (`--max-restarts`) loaded after it, and its own line says where."""
    said: list[bool] = []

    def say(*_, **__) -> None:
        if said:
            return
        said.append(True)
        if step is not None and optimizer_steps(model) > int(step):
            return
        replay = input_position.outcome()
        if is_chief:
            print(f"{head}{replay.line() if replay is not None else ''}")

    return keras.callbacks.LambdaCallback(on_train_batch_begin=say, on_train_end=say)


def _start_step(model: Any, meta: dict, start: dict) -> int | None:
    """The optimizer's step when the checkpoint's run began; None (its whole epochs are
    counted instead) when not recorded or when the optimizer's step was not restored."""
    if start.get("step") is None or meta.get("step") is None:
        return None
    if optimizer_steps(model) != int(meta["step"]):   # restored when it is first built
        return None
    return int(start["step"])
