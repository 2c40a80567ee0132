"""The Functional API (keras.io guide, Keras 3), its toy ResNet: a functional model with
residual connections (`layers.add` of two Conv2D blocks onto earlier outputs),
GlobalAveragePooling2D, Dropout and a 10-way logits head, compiled with
CategoricalCrossentropy(from_logits=True) and trained on CIFAR-10-shaped images with
`validation_split`."""

from corpus.offline_data import seeded

SOURCE = {
    "repository": "keras-team/keras-io",
    "commit": "855e37d4f5562751e6694cdadf93b2b7a72c935f",
    "path": "guides/keras_core/functional_api.py",
    "title": "The Functional API",
}
KERAS = "default"
CHANGES = [
    "keras.datasets.cifar10.load_data() answers offline (DATA): generated images with "
    "CIFAR-10's shapes and dtypes (uint8 32x32x3 in [0, 255], uint8 labels 0-9 of shape "
    "(n, 1)), 1,000 training and 200 test images drawn from a fixed seed; each class has "
    "its own mean colour so that there is something to learn",
    "cells: the guide's Setup, then its section 'A toy ResNet model' (model, training); "
    "dropped: the `keras.utils.plot_model` cell (pydot is not installed); the other "
    "sections are cut",
    "DATA seeds every generator (`corpus.offline_data.seeded(1)`): the program's shuffles "
    "and initial weights are unseeded; seeded, every worker starts and shuffles as one "
    "process does, so its loss can be compared tightly",
]
DATA = r'''
import numpy as _np
import keras as _keras

def _generated_cifar10(path=None):
    """((x_train, y_train), (x_test, y_test)) like keras.datasets.cifar10.load_data()."""
    rng = _np.random.RandomState(10)
    colours = rng.uniform(40, 215, size=(10, 1, 1, 3))
    def split(n):
        labels = rng.randint(0, 10, size=(n, 1)).astype(_np.uint8)
        images = colours[labels[:, 0]] + rng.normal(0, 40, size=(n, 32, 32, 3))
        return _np.clip(images, 0, 255).astype(_np.uint8), labels
    return split(1000), split(200)

_keras.datasets.cifar10.load_data = _generated_cifar10
'''
DATA += seeded(1)
CELLS = [
    r'''import numpy as np
import keras
from keras import layers
from keras import ops''',
    r'''inputs = keras.Input(shape=(32, 32, 3), name="img")
x = layers.Conv2D(32, 3, activation="relu")(inputs)
x = layers.Conv2D(64, 3, activation="relu")(x)
block_1_output = layers.MaxPooling2D(3)(x)

x = layers.Conv2D(64, 3, activation="relu", padding="same")(block_1_output)
x = layers.Conv2D(64, 3, activation="relu", padding="same")(x)
block_2_output = layers.add([x, block_1_output])

x = layers.Conv2D(64, 3, activation="relu", padding="same")(block_2_output)
x = layers.Conv2D(64, 3, activation="relu", padding="same")(x)
block_3_output = layers.add([x, block_2_output])

x = layers.Conv2D(64, 3, activation="relu")(block_3_output)
x = layers.GlobalAveragePooling2D()(x)
x = layers.Dense(256, activation="relu")(x)
x = layers.Dropout(0.5)(x)
outputs = layers.Dense(10)(x)

model = keras.Model(inputs, outputs, name="toy_resnet")
model.summary()''',
    r'''(x_train, y_train), (x_test, y_test) = keras.datasets.cifar10.load_data()

x_train = x_train.astype("float32") / 255.0
x_test = x_test.astype("float32") / 255.0
y_train = keras.utils.to_categorical(y_train, 10)
y_test = keras.utils.to_categorical(y_test, 10)

model.compile(
    optimizer=keras.optimizers.RMSprop(1e-3),
    loss=keras.losses.CategoricalCrossentropy(from_logits=True),
    metrics=["acc"],
)
# We restrict the data to the first 1000 samples so as to limit execution time
# on Colab. Try to train on the entire dataset until convergence!
model.fit(
    x_train[:1000],
    y_train[:1000],
    batch_size=64,
    epochs=1,
    validation_split=0.2,
)''',
]
MODEL = "model"
LOSS = "model.history.history['loss'][-1]"
# Seeded: the same start and global batches as one process, but each replica draws
# its own Dropout masks (measured 2026-11-26: 2.2523 vs 2.2322).
TOLERANCE = 0.05
ONE_PROCESS = {}
EXPECT_ERROR = None
