"""The Keras callback that says, on the chief, where BackupAndRestore picked training up.

The callback's logic; keras_callbacks.py puts it on the Callback class of the model's Keras.
"""

from __future__ import annotations

from . import input_position, random_draws
from .callback_logic import CallbackLogic


class ResumeNotice(CallbackLogic):
    """Prints the epoch and step a fit resumed at from its automatic backup, where its
    input was put back (input_position.py) and what its random layers draw from
    (random_draws.py); chief only. `start_step`: the optimizer's step
    count when the fit was called, before the backup could load: a model trained by an
    earlier fit starts above 0 without resuming anything, and a resumed fit's step is
    counted from there."""

    def __init__(self, *, is_chief: bool, start_step: int = 0):
        super().__init__()
        self.is_chief = is_chief
        self.start_step = start_step
        self._said = False      # once per fit: at its first batch
        self._epoch: int | None = None   # the first epoch it runs

    def on_epoch_begin(self, epoch, logs=None):
        if self._epoch is None:
            self._epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        # Said at the first batch: Keras 3 reads the epoch's input after on_epoch_begin.
        if self._said:
            return
        self._said = True
        step = int(self.model.optimizer.iterations.numpy()) - self.start_step
        if step > 0 and self.is_chief:
            replay = input_position.outcome()   # where the input was put back (if it was)
            print(f"resumed from the automatic backup: epoch {(self._epoch or 0) + 1}, "
                  f"step {step}{replay.line() if replay is not None else ''}"
                  f"{random_draws.resume_line(self.model)}")
