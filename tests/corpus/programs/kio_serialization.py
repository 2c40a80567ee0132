"""Save, serialize, and export models (keras.io guide, Keras 3), its saving sections: a
functional model trained then saved to `.keras` and reloaded with
`keras.models.load_model` (predictions compared with `np.testing.assert_allclose`), then a
model with a custom layer and a custom activation registered with
`keras.saving.register_keras_serializable`, trained, saved and reloaded three ways
(registered, `custom_objects=`, `custom_object_scope`). Every worker saves to the same
path and loads it back."""

SOURCE = {
    "repository": "keras-team/keras-io",
    "commit": "bbbd0438db125bd087c583c41b292ea7a5c4e4ad",
    "path": "guides/keras_core/serialization_and_saving.py",
    "title": "Save, serialize, and export models",
}
KERAS = "default"
CHANGES = [
    "Setup: `import keras_core as keras` and `from keras_core import ops` -> `keras` "
    "(this revision predates Keras Core's release as Keras 3; keras_core is not installed)",
    "DATA calls keras.utils.set_random_seed(1337): the guide draws its arrays with "
    "np.random.random unseeded and its models start from random weights, so without a "
    "seed every worker and the one-process reference would train different data from "
    "different starts (a single step of a 1-unit Dense: its loss is mostly the start's)",
    "cells: the guide's Setup, then its sections 'Saving' and 'Custom objects' (registering, "
    "custom_objects=, custom object scope); the config, weights-only and export sections "
    "are cut (they train nothing)",
]
DATA = r'''
import keras as _keras
_keras.utils.set_random_seed(1337)
'''
CELLS = [
    r'''import numpy as np
import keras
from keras import ops''',
    r'''def get_model():
    # Create a simple model.
    inputs = keras.Input(shape=(32,))
    outputs = keras.layers.Dense(1)(inputs)
    model = keras.Model(inputs, outputs)
    model.compile(optimizer=keras.optimizers.Adam(), loss="mean_squared_error")
    return model


model = get_model()

# Train the model.
test_input = np.random.random((128, 32))
test_target = np.random.random((128, 1))
model.fit(test_input, test_target)

# Calling `save('my_model.keras')` creates a zip archive `my_model.keras`.
model.save("my_model.keras")

# It can be used to reconstruct the model identically.
reconstructed_model = keras.models.load_model("my_model.keras")

# Let's check:
np.testing.assert_allclose(
    model.predict(test_input), reconstructed_model.predict(test_input)
)''',
    r'''# Clear all previously registered custom objects
keras.saving.get_custom_objects().clear()


# Upon registration, you can optionally specify a package or a name.
# If left blank, the package defaults to `Custom` and the name defaults to
# the class name.
@keras.saving.register_keras_serializable(package="MyLayers")
class CustomLayer(keras.layers.Layer):
    def __init__(self, factor):
        super().__init__()
        self.factor = factor

    def call(self, x):
        return x * self.factor

    def get_config(self):
        return {"factor": self.factor}


@keras.saving.register_keras_serializable(package="my_package", name="custom_fn")
def custom_fn(x):
    return x**2


# Create the model.
def get_model():
    inputs = keras.Input(shape=(4,))
    mid = CustomLayer(0.5)(inputs)
    outputs = keras.layers.Dense(1, activation=custom_fn)(mid)
    model = keras.Model(inputs, outputs)
    model.compile(optimizer="rmsprop", loss="mean_squared_error")
    return model


# Train the model.
def train_model(model):
    input = np.random.random((4, 4))
    target = np.random.random((4, 1))
    model.fit(input, target)
    return model


test_input = np.random.random((4, 4))
test_target = np.random.random((4, 1))

model = get_model()
model = train_model(model)
model.save("custom_model.keras")

# Now, we can simply load without worrying about our custom objects.
reconstructed_model = keras.models.load_model("custom_model.keras")

# Let's check:
np.testing.assert_allclose(
    model.predict(test_input), reconstructed_model.predict(test_input)
)''',
    r'''model = get_model()
model = train_model(model)

# Calling `save('my_model.keras')` creates a zip archive `my_model.keras`.
model.save("custom_model.keras")

# Upon loading, pass a dict containing the custom objects used in the
# `custom_objects` argument of `keras.models.load_model()`.
reconstructed_model = keras.models.load_model(
    "custom_model.keras",
    custom_objects={"CustomLayer": CustomLayer, "custom_fn": custom_fn},
)

# Let's check:
np.testing.assert_allclose(
    model.predict(test_input), reconstructed_model.predict(test_input)
)''',
    r'''model = get_model()
model = train_model(model)
model.save("custom_model.keras")

# Pass the custom objects dictionary to a custom object scope and place
# the `keras.models.load_model()` call within the scope.
custom_objects = {"CustomLayer": CustomLayer, "custom_fn": custom_fn}

with keras.saving.custom_object_scope(custom_objects):
    reconstructed_model = keras.models.load_model("custom_model.keras")

# Let's check:
np.testing.assert_allclose(
    model.predict(test_input), reconstructed_model.predict(test_input)
)''',
]
# The model reloaded from the last save: the file every worker wrote and read back.
MODEL = "reconstructed_model"
LOSS = "model.history.history['loss'][-1]"
# Same seed, data and start everywhere; the one step's loss is the 4 samples' mean, split
# 2 + 2 across the workers: it differs from one process's only by float summation order
# (measured 2026-11-26: 0.156629190 against 0.156629175).
TOLERANCE = 0.01
ONE_PROCESS = {}
EXPECT_ERROR = None
