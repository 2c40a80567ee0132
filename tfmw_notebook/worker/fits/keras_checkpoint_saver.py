"""The Keras callback that writes the automatic checkpoints (checkpointing.py saves them).

Imports TensorFlow: loaded through keras_callbacks.py only, which puts this logic on the
Callback class of the model's Keras.
"""

from __future__ import annotations

import time

import tensorflow as tf

from ...protocol import checkpoints
from ...protocol.events import metric_values
from ...protocol.run_options import CheckpointPolicy
from ..writes import background_writes, weights_snapshot
from ..writes.checkpointing import check_shared, save
from .callback_logic import CallbackLogic


class CheckpointSaver(CallbackLogic):
    """Saves every `policy.every` epochs into `policy.run_dir`, then prunes."""

    def __init__(self, *, policy: CheckpointPolicy, rank: int, is_chief: bool,
                 world_size: int):
        super().__init__()
        self.policy, self.rank, self.is_chief = policy, rank, is_chief
        self.world_size = world_size
        self._started = time.monotonic()
        self.last_saved_epoch: int | None = None  # epochs done at the last save
        self._taker = weights_snapshot.SnapshotTaker()   # a fit's saves gather once

    def on_train_begin(self, logs=None):
        self._started = time.monotonic()
        self._taker = weights_snapshot.SnapshotTaker()
        run_dir = self.policy.run_dir
        background_writes.wait()   # an earlier fit's last write: its temp dir is not debris
        if self.is_chief:
            checkpoints.ensure_run(run_dir, self.world_size, tf.__version__)
            checkpoints.clean_temp(run_dir)  # debris of a save cut short earlier
        check_shared(run_dir, rank=self.rank, world_size=self.world_size)

    def on_epoch_end(self, epoch, logs=None):
        done = epoch + 1
        if done % self.policy.every:
            return
        metrics = metric_values(logs)
        save(self.model, run_dir=self.policy.run_dir, epoch=done, rank=self.rank,
             is_chief=self.is_chief, metrics=metrics,
             wall_time=time.monotonic() - self._started, policy=self.policy,
             taker=self._taker)
        self.last_saved_epoch = done
