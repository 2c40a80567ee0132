"""Pure tests of the hint under Keras-2 code that fails because the workers' tf.keras is
Keras 3 (magics/hints.py): it names `%tfdist restart --keras 2`, on Keras 3 workers only.
The messages were produced for real in one process (no MultiWorkerMirroredStrategy) with
TensorFlow 2.21 and Keras 3.15.1 as `tf.keras`; tests/test_keras_switch.py shows the hint
under a real worker's error. Also the `--no-scope` hint, kept for the SavedModel error."""

import pytest
from tfmw_notebook.magics.hints import keras2_code_hint, mixed_keras_hint, no_scope_hint

pytestmark = pytest.mark.unit

# What TensorFlow's Keras-2 tutorials do -> what Keras 3 (as tf.keras) raised.
KERAS2_CODE = {
    "metric.reset_states()": (
        "AttributeError", "'Mean' object has no attribute 'reset_states'"),
    "model.save(directory)": (
        "ValueError", "Invalid filepath extension for saving. Please add either a `.keras` "
        "extension for the native Keras format (recommended) or a `.h5` extension. Use "
        "`model.export(filepath)` if you want to export a SavedModel for use with "
        "TFLite/TFServing/etc. Received: filepath=/tmp/hints/savedir."),
    "tf.keras.models.load_model(directory)": (
        "ValueError", "File format not supported: filepath=/tmp/hints/smdir. Keras 3 only "
        "supports V3 `.keras` files, legacy H5 format files (`.h5` extension). Note that the "
        "legacy SavedModel format is not supported by `load_model()` in Keras 3. In order to "
        "reload a TensorFlow SavedModel as an inference-only layer in Keras 3, use "
        "`keras.layers.TFSMLayer(/tmp/hints/smdir, call_endpoint='serving_default')` (note "
        "that your `call_endpoint` might have a different name)."),
    "model.save_spec()": (
        "AttributeError", "'Sequential' object has no attribute 'save_spec'"),
    "tf.keras.optimizers.legacy.SGD(0.1)": (
        "ImportError", "`keras.optimizers.legacy` is not supported in Keras 3. When using "
        "`tf.keras`, to continue using a `tf.keras.optimizers.legacy` optimizer, you can "
        "install the `tf_keras` package (Keras 2) and set the environment variable "
        "`TF_USE_LEGACY_KERAS=True` to configure TensorFlow to use `tf_keras` when accessing "
        "`tf.keras`."),
    "tf.keras.losses.mean_squared_error": (
        "AttributeError", "module 'keras._tf_keras.keras.losses' has no attribute "
        "'mean_squared_error'"),
    "tf.keras.metrics.mean_squared_error": (
        "AttributeError", "module 'keras._tf_keras.keras.metrics' has no attribute "
        "'mean_squared_error'"),
    "model.save(path, save_format='tf')": (
        "ValueError", "The `save_format` argument is deprecated in Keras 3. Please remove this "
        "argument and pass a file path with either `.keras` or `.h5` extension.Received: "
        "save_format=tf"),
    "model.save_weights(checkpoint_prefix)": (
        "ValueError", "The filename must end in `.weights.h5`. Received: "
        "filepath=/tmp/hints/ckpt"),
    "model.load_weights(checkpoint_prefix)": (
        "ValueError", "File format not supported: filepath=/tmp/hints/ckpt. Keras 3 only "
        "supports V3 `.keras` files, `.weights.h5` files, legacy H5 format files (`.h5` "
        "extension), or Orbax checkpoints."),
}


@pytest.mark.parametrize("code", sorted(KERAS2_CODE))
def test_keras_2_code_on_keras_3_workers_is_pointed_to_keras_2(code):
    hint = keras2_code_hint(*KERAS2_CODE[code], workers_keras=3)
    assert hint is not None and "\n" not in hint
    assert "`%tfdist restart --keras 2`" in hint
    assert mixed_keras_hint(*KERAS2_CODE[code]) is None   # one hint, not two


@pytest.mark.parametrize("code", sorted(KERAS2_CODE))
def test_no_such_hint_on_tf_keras_workers(code):
    """With `--keras 2` tf.keras code does not raise these; `import keras` code that does
    is Keras 3 code, which tf-keras would not help."""
    assert keras2_code_hint(*KERAS2_CODE[code], workers_keras=2) is None


def test_a_qualified_type_name_is_read_by_its_last_part():
    name, message = KERAS2_CODE["metric.reset_states()"]
    assert keras2_code_hint("builtins." + name, message, workers_keras=3) is not None


@pytest.mark.parametrize("type_name, message", [
    ("AttributeError", "'Mean' object has no attribute 'reset_state'"),
    ("AttributeError", "'MyModel' object has no attribute 'save_spec_of_mine'"),
    ("AttributeError", "module 'keras.losses' has no attribute 'mean_squared_eror'"),
    ("AttributeError", "module 'numpy' has no attribute 'keras'"),
    ("TypeError", "'Mean' object has no attribute 'reset_states'"),     # the wrong type
    ("ValueError", "Invalid filepath extension for saving my own thing"),
    ("ValueError", "File format not supported: filepath=data.parquet"),
])
def test_no_hint_for_other_errors(type_name, message):
    assert keras2_code_hint(type_name, message, workers_keras=3) is None


# A loaded SavedModel's signature called in the scope, before
# worker/corrections/saved_model_calls.py
# (TF 2.21, one process, MultiWorkerMirroredStrategy); should it still show, the hint stays.
PLACEHOLDER = ("Expected 'tf.Tensor(False, shape=(), dtype=bool)' to be true. Summarized data: "
               "b'Trying to access a placeholder that is not supposed to be executed. This "
               "means you are executing a graph generated from the cross-replica context in "
               "an in-replica context.'")


def test_the_placeholder_error_still_names_no_scope():
    hint = no_scope_hint(PLACEHOLDER)
    assert hint is not None and "`%%tfdist --no-scope`" in hint and "\n" not in hint
    assert keras2_code_hint("InvalidArgumentError", PLACEHOLDER, workers_keras=3) is None
