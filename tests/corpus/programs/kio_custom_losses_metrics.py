"""Training & evaluation with the built-in methods (keras.io guide, Keras 3): a
functional MNIST MLP trained with `validation_data`, then the guide's custom pieces: a
loss function built from `keras.ops`, a `keras.losses.Loss` subclass (CustomMSE), a
stateful `keras.metrics.Metric` subclass (CategoricalTruePositives, `add_variable` +
`assign_add`) in `compile(metrics=...)`, and a pass-through layer that calls
`self.add_loss` (ActivityRegularizationLayer)."""

from corpus.offline_data import PATCH_KERAS_DATASETS

SOURCE = {
    "repository": "keras-team/keras-io",
    "commit": "855e37d4f5562751e6694cdadf93b2b7a72c935f",
    "path": "guides/keras_core/training_with_built_in_methods.py",
    "title": "Training & evaluation with the built-in methods",
}
KERAS = "default"
CHANGES = [
    "keras.datasets.mnist.load_data() answers offline (DATA): scikit-learn's digits at "
    "MNIST's 28x28 uint8 in [0, 255], 1,500 training and 297 test images",
    "`import torch` dropped from Setup (only the guide's PyTorch DataLoader section, cut "
    "here, uses it; torch is not installed)",
    "sizes: x_train.reshape(60000, 784) / x_test.reshape(10000, 784) -> reshape(-1, 784) "
    "(the stand-in has 1,500 / 297 images); the validation reserve is the last 300 "
    "training images instead of 10,000",
    "cells: the script split at its section headers from Setup to 'Handling losses and "
    "metrics that don't fit the standard signature' (up to the ActivityRegularizationLayer "
    "fit); dropped: the `history.history` display cell; cut: everything after that fit "
    "(LogisticEndpoint, validation_split, tf.data, PyDataset, PyTorch DataLoader, sample "
    "and class weights, multi-input models, callbacks, TensorBoard)",
    "DATA calls keras.utils.set_random_seed(1): the guide's models start from random weights "
    "and its fits shuffle unseeded; its final loss was 5.1 to 9.7 across runs, and seeded "
    "every worker shuffles the same way, so the global batches are the reference's",
]
DATA = PATCH_KERAS_DATASETS + """
import keras as _keras
_keras.utils.set_random_seed(1)
"""
CELLS = [
    r'''import tensorflow as tf

import os
import numpy as np
import keras
from keras import layers
from keras import ops''',
    r'''inputs = keras.Input(shape=(784,), name="digits")
x = layers.Dense(64, activation="relu", name="dense_1")(inputs)
x = layers.Dense(64, activation="relu", name="dense_2")(x)
outputs = layers.Dense(10, activation="softmax", name="predictions")(x)

model = keras.Model(inputs=inputs, outputs=outputs)''',
    r'''(x_train, y_train), (x_test, y_test) = keras.datasets.mnist.load_data()

# Preprocess the data (these are NumPy arrays)
x_train = x_train.reshape(-1, 784).astype("float32") / 255
x_test = x_test.reshape(-1, 784).astype("float32") / 255

y_train = y_train.astype("float32")
y_test = y_test.astype("float32")

# Reserve 10,000 samples for validation
x_val = x_train[-300:]
y_val = y_train[-300:]
x_train = x_train[:-300]
y_train = y_train[:-300]''',
    r'''model.compile(
    optimizer=keras.optimizers.RMSprop(),  # Optimizer
    # Loss function to minimize
    loss=keras.losses.SparseCategoricalCrossentropy(),
    # List of metrics to monitor
    metrics=[keras.metrics.SparseCategoricalAccuracy()],
)''',
    r'''print("Fit model on training data")
history = model.fit(
    x_train,
    y_train,
    batch_size=64,
    epochs=2,
    # We pass some validation for
    # monitoring validation loss and metrics
    # at the end of each epoch
    validation_data=(x_val, y_val),
)''',
    r'''# Evaluate the model on the test data using `evaluate`
print("Evaluate on test data")
results = model.evaluate(x_test, y_test, batch_size=128)
print("test loss, test acc:", results)

# Generate predictions (probabilities -- the output of the last layer)
# on new data using `predict`
print("Generate predictions for 3 samples")
predictions = model.predict(x_test[:3])
print("predictions shape:", predictions.shape)''',
    r'''model.compile(
    optimizer=keras.optimizers.RMSprop(learning_rate=1e-3),
    loss=keras.losses.SparseCategoricalCrossentropy(),
    metrics=[keras.metrics.SparseCategoricalAccuracy()],
)''',
    r'''model.compile(
    optimizer="rmsprop",
    loss="sparse_categorical_crossentropy",
    metrics=["sparse_categorical_accuracy"],
)''',
    r'''def get_uncompiled_model():
    inputs = keras.Input(shape=(784,), name="digits")
    x = layers.Dense(64, activation="relu", name="dense_1")(inputs)
    x = layers.Dense(64, activation="relu", name="dense_2")(x)
    outputs = layers.Dense(10, activation="softmax", name="predictions")(x)
    model = keras.Model(inputs=inputs, outputs=outputs)
    return model


def get_compiled_model():
    model = get_uncompiled_model()
    model.compile(
        optimizer="rmsprop",
        loss="sparse_categorical_crossentropy",
        metrics=["sparse_categorical_accuracy"],
    )
    return model''',
    r'''def custom_mean_squared_error(y_true, y_pred):
    return ops.mean(ops.square(y_true - y_pred), axis=-1)


model = get_uncompiled_model()
model.compile(optimizer=keras.optimizers.Adam(), loss=custom_mean_squared_error)

# We need to one-hot encode the labels to use MSE
y_train_one_hot = ops.one_hot(y_train, num_classes=10)
model.fit(x_train, y_train_one_hot, batch_size=64, epochs=1)''',
    r'''class CustomMSE(keras.losses.Loss):
    def __init__(self, regularization_factor=0.1, name="custom_mse"):
        super().__init__(name=name)
        self.regularization_factor = regularization_factor

    def call(self, y_true, y_pred):
        mse = ops.mean(ops.square(y_true - y_pred), axis=-1)
        reg = ops.mean(ops.square(0.5 - y_pred), axis=-1)
        return mse + reg * self.regularization_factor


model = get_uncompiled_model()
model.compile(optimizer=keras.optimizers.Adam(), loss=CustomMSE())

y_train_one_hot = ops.one_hot(y_train, num_classes=10)
model.fit(x_train, y_train_one_hot, batch_size=64, epochs=1)''',
    r'''class CategoricalTruePositives(keras.metrics.Metric):
    def __init__(self, name="categorical_true_positives", **kwargs):
        super().__init__(name=name, **kwargs)
        self.true_positives = self.add_variable(
            shape=(), name="ctp", initializer="zeros"
        )

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_pred = ops.reshape(ops.argmax(y_pred, axis=1), (-1, 1))
        values = ops.cast(y_true, "int32") == ops.cast(y_pred, "int32")
        values = ops.cast(values, "float32")
        if sample_weight is not None:
            sample_weight = ops.cast(sample_weight, "float32")
            values = ops.multiply(values, sample_weight)
        self.true_positives.assign_add(ops.sum(values))

    def result(self):
        return self.true_positives

    def reset_state(self):
        # The state of the metric will be reset at the start of each epoch.
        self.true_positives.assign(0.0)


model = get_uncompiled_model()
model.compile(
    optimizer=keras.optimizers.RMSprop(learning_rate=1e-3),
    loss=keras.losses.SparseCategoricalCrossentropy(),
    metrics=[CategoricalTruePositives()],
)
model.fit(x_train, y_train, batch_size=64, epochs=3)''',
    r'''class ActivityRegularizationLayer(layers.Layer):
    def call(self, inputs):
        self.add_loss(ops.sum(inputs) * 0.1)
        return inputs  # Pass-through layer.


inputs = keras.Input(shape=(784,), name="digits")
x = layers.Dense(64, activation="relu", name="dense_1")(inputs)

# Insert activity regularization as a layer
x = ActivityRegularizationLayer()(x)

x = layers.Dense(64, activation="relu", name="dense_2")(x)
outputs = layers.Dense(10, name="predictions")(x)

model = keras.Model(inputs=inputs, outputs=outputs)
model.compile(
    optimizer=keras.optimizers.RMSprop(learning_rate=1e-3),
    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
)

# The displayed loss will be much higher than before
# due to the regularization component.
model.fit(x_train, y_train, batch_size=64, epochs=1)''',
]
MODEL = "model"
# The ActivityRegularizationLayer model's fit (the last); History sets model.history.
LOSS = "model.history.history['loss'][-1]"
# Seeded: the same start and global batches as the reference.
TOLERANCE = 0.01
ONE_PROCESS = {}
EXPECT_ERROR = None
# The activity loss is a sum over the batch a replica sees: on 2 replicas each sums 32
# examples, not 64, so the loss (and the regularizer's gradient) is about half the
# no-strategy one whatever runs the replicas. Measured, seeded (2026-11-26): 2 workers
# 5.8728614; one process in a MirroredStrategy on 2 CPUs 5.8728614; one process with no
# strategy 9.4313145. The reference therefore runs on 2 replicas.
REFERENCE_REPLICAS = 2
