"""The Keras callback that puts a Keras 3 fit resumed from its backup at the backup's step.

Keras 3's BackupAndRestore gives back the weights and optimizer of its last backup, and
then runs the backup's epoch again from its first batch: a backup taken every 10 steps
mid-epoch trained those steps twice. Right after it loaded (this callback comes after it),
the fit is put at the epoch and batch of the restored optimizer's step; input_position.py
starts that epoch's loop, and its input, there. tf-keras' own BackupAndRestore does that
already: there this callback does nothing.

The callback's logic; keras_callbacks.py puts it on the Callback class of the model's Keras.
"""

from __future__ import annotations

from . import input_position
from .callback_logic import CallbackLogic


class ResumePoint(CallbackLogic):
    """Keras 3: the resumed fit's first epoch is the one of the restored step."""

    def __init__(self):
        super().__init__()
        self._moved = False

    def on_train_begin(self, logs=None):
        if not hasattr(self.model, "_initial_epoch"):   # tf-keras: it resumes exactly
            return
        epoch = input_position.resume_at(self.model, self.params.get("steps"))
        if epoch is not None:
            self.model._initial_epoch = epoch   # Keras 3's fit reads it after this call
            self._moved = True

    def on_train_end(self, logs=None):
        if self._moved:   # Keras 3 keeps it: the model's next fit would start there too
            self.model._initial_epoch = None
