"""The Keras callback that says, on the chief, where BackupAndRestore picked training up.

Imports TensorFlow: loaded through keras_callbacks.py only.
"""

from __future__ import annotations

import tensorflow as tf


class ResumeNotice(tf.keras.callbacks.Callback):
    """Prints the epoch and step a fit resumed at from its automatic backup (chief only)."""

    def __init__(self, *, is_chief: bool):
        super().__init__()
        self.is_chief = is_chief
        self._said = False      # once per fit: the first epoch it runs

    def on_epoch_begin(self, epoch, logs=None):
        if self._said:
            return
        self._said = True
        step = int(self.model.optimizer.iterations.numpy())
        if step and self.is_chief:
            print(f"resumed from the automatic backup: epoch {epoch + 1}, "
                  f"step {step}")
