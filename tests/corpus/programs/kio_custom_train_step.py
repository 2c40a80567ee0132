"""Customizing what happens in `fit()` with TensorFlow (keras.io guide, Keras 3): a
functional `keras.Model` subclass overriding `train_step` with a `GradientTape`,
`self.compute_loss`, `self.optimizer.apply` and the compiled metrics; then a lower-level
version with its own `Mean`/`MeanAbsoluteError` trackers listed in a `metrics` property
and no loss in `compile()`; then `sample_weight` unpacked from the data and passed to
`compute_loss` and the metrics."""

SOURCE = {
    "repository": "keras-team/keras-io",
    "commit": "b4108fbfe9f0cbad37f4f3c2bc5e4db0dd8bd2b6",
    "path": "guides/custom_train_step_in_tensorflow.py",
    "title": "Customizing what happens in `fit()` with TensorFlow",
}
KERAS = "default"
CHANGES = [
    "DATA calls keras.utils.set_random_seed(1337): the guide draws its training arrays "
    "with np.random.random unseeded and its models start from random weights, so without "
    "a seed every worker and the one-process reference would train different arrays from "
    "different starts (a 1-unit Dense after 94 Adam steps: its loss is mostly the start's)",
    "cells: the script split at its section headers (Setup, A first simple example, "
    "Going lower-level, Supporting sample_weight & class_weight); prose dropped",
    "cut: 'Providing your own evaluation step' (it only evaluates a new untrained model) "
    "and the GAN section (its own program, kio_gan)",
    "LOSS is the evaluated loss on the training data (see LOSS): the guide's train_step logs "
    "Keras' per-replica scaled loss, half the loss on 2 replicas in one process too",
]
DATA = r'''
import keras as _keras
_keras.utils.set_random_seed(1337)
'''
CELLS = [
    r'''import os

# This guide can only be run with the TF backend.
os.environ["KERAS_BACKEND"] = "tensorflow"

import tensorflow as tf
import keras
from keras import layers
import numpy as np''',
    r'''class CustomModel(keras.Model):
    def train_step(self, data):
        # Unpack the data. Its structure depends on your model and
        # on what you pass to `fit()`.
        x, y = data

        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)  # Forward pass
            # Compute the loss value
            # (the loss function is configured in `compile()`)
            loss = self.compute_loss(y=y, y_pred=y_pred)

        # Compute gradients
        trainable_vars = self.trainable_variables
        gradients = tape.gradient(loss, trainable_vars)

        # Update weights
        self.optimizer.apply(gradients, trainable_vars)

        # Update metrics (includes the metric that tracks the loss)
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss)
            else:
                metric.update_state(y, y_pred)

        # Return a dict mapping metric names to current value
        return {m.name: m.result() for m in self.metrics}''',
    r'''# Construct and compile an instance of CustomModel
inputs = keras.Input(shape=(32,))
outputs = keras.layers.Dense(1)(inputs)
model = CustomModel(inputs, outputs)
model.compile(optimizer="adam", loss="mse", metrics=["mae"])

# Just use `fit` as usual
x = np.random.random((1000, 32))
y = np.random.random((1000, 1))
model.fit(x, y, epochs=3)''',
    r'''class CustomModel(keras.Model):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.loss_tracker = keras.metrics.Mean(name="loss")
        self.mae_metric = keras.metrics.MeanAbsoluteError(name="mae")
        self.loss_fn = keras.losses.MeanSquaredError()

    def train_step(self, data):
        x, y = data

        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)  # Forward pass
            # Compute our own loss
            loss = self.loss_fn(y, y_pred)

        # Compute gradients
        trainable_vars = self.trainable_variables
        gradients = tape.gradient(loss, trainable_vars)

        # Update weights
        self.optimizer.apply(gradients, trainable_vars)

        # Compute our own metrics
        self.loss_tracker.update_state(loss)
        self.mae_metric.update_state(y, y_pred)
        return {
            "loss": self.loss_tracker.result(),
            "mae": self.mae_metric.result(),
        }

    @property
    def metrics(self):
        # We list our `Metric` objects here so that `reset_states()` can be
        # called automatically at the start of each epoch
        # or at the start of `evaluate()`.
        return [self.loss_tracker, self.mae_metric]


# Construct an instance of CustomModel
inputs = keras.Input(shape=(32,))
outputs = keras.layers.Dense(1)(inputs)
model = CustomModel(inputs, outputs)

# We don't pass a loss or metrics here.
model.compile(optimizer="adam")

# Just use `fit` as usual -- you can use callbacks, etc.
x = np.random.random((1000, 32))
y = np.random.random((1000, 1))
model.fit(x, y, epochs=5)''',
    r'''class CustomModel(keras.Model):
    def train_step(self, data):
        # Unpack the data. Its structure depends on your model and
        # on what you pass to `fit()`.
        if len(data) == 3:
            x, y, sample_weight = data
        else:
            sample_weight = None
            x, y = data

        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)  # Forward pass
            # Compute the loss value.
            # The loss function is configured in `compile()`.
            loss = self.compute_loss(
                y=y,
                y_pred=y_pred,
                sample_weight=sample_weight,
            )

        # Compute gradients
        trainable_vars = self.trainable_variables
        gradients = tape.gradient(loss, trainable_vars)

        # Update weights
        self.optimizer.apply(gradients, trainable_vars)

        # Update the metrics.
        # Metrics are configured in `compile()`.
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss)
            else:
                metric.update_state(y, y_pred, sample_weight=sample_weight)

        # Return a dict mapping metric names to current value.
        # Note that it will include the loss (tracked in self.metrics).
        return {m.name: m.result() for m in self.metrics}


# Construct and compile an instance of CustomModel
inputs = keras.Input(shape=(32,))
outputs = keras.layers.Dense(1)(inputs)
model = CustomModel(inputs, outputs)
model.compile(optimizer="adam", loss="mse", metrics=["mae"])

# You can now use sample_weight argument
x = np.random.random((1000, 32))
y = np.random.random((1000, 1))
sw = np.random.random((1000, 1))
model.fit(x, y, sample_weight=sw, epochs=3)''',
]
MODEL = "model"
# The trained model's loss on the training data, by Keras' own test step. Not the loss the
# guide's train_step logs: `compute_loss` returns the loss Keras scaled by 1 / replicas (so
# that summing the replicas' gradients gives the mean: keras/src/losses/loss.py,
# scale_loss_for_distribution), and Keras' own train_step unscales it before logging, the
# guide's does not. Under any strategy with 2 replicas that logged loss is half the loss:
# measured in one process too, MirroredStrategy on 2 CPU devices, 7.95 against 15.91 with no
# strategy, the evaluated loss the same (8.7627) both ways.
LOSS = "model.evaluate(x, y, sample_weight=sw, verbose=0)[0]"
# Same arrays, start and shuffles everywhere (seeded): the workers' global batches are the
# one process's (measured 2026-11-26: 0.13309513 against 0.13309515).
TOLERANCE = 0.01
ONE_PROCESS = {}
EXPECT_ERROR = None
