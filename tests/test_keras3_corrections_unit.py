"""Pure tests of worker/corrections/keras3_corrections.py: version ranges, apply()'s once-only
contract,
and the hints for the errors observed when tf-keras and Keras 3 objects meet. No TensorFlow
and no Keras are imported (the corrections themselves are tested on 2 real workers in
tests/test_keras3.py, each shown to be needed)."""

import sys
import types
import warnings

import pytest
from tfmw_notebook.magics.hints import mixed_keras_hint
from tfmw_notebook.protocol.warning import TFDistWarning
from tfmw_notebook.worker.corrections import keras3_corrections as kc

# --- versions -------------------------------------------------------------------------------


@pytest.mark.parametrize("text, expected", [
    ("3.15.1", (3, 15, 1)),
    ("3.10", (3, 10)),
    ("3.16.0.dev2025010203", (3, 16, 0)),
    ("v3.1.0", (3, 1, 0)),
    ("3.13.2rc1", (3, 13, 2)),
])
def test_parse_version(text, expected):
    assert kc.parse_version(text) == expected


def test_parse_version_rejects_text_without_a_number():
    with pytest.raises(ValueError, match="Invalid value for argument `text`"):
        kc.parse_version("nightly")


@pytest.mark.parametrize("version, inside", [
    ("3.15.1", True), ("3.13.2", True), ("3.10.0", True), ("3.10", True), ("3.15.99", True),
    ("3.16.0.dev2026102704", True), ("3.9.2", False), ("3.17.0", False), ("3.17", False),
    ("4.0.0", False), ("2.15.0", False),
])
def test_verified_range(version, inside):
    assert kc.VERIFIED_KERAS == (">=3.10", "<3.17")
    assert kc.in_range(version) is inside


def test_in_range_with_other_bounds():
    assert kc.in_range("3.15.1", ("==3.15.1",))
    assert not kc.in_range("3.15.0", ("==3.15.1",))
    assert kc.in_range("3.15", ("==3.15.0",))          # missing parts count as 0
    assert kc.in_range("3.14.1", (">3.14", "<=3.14.1", "!=3.14.0"))


def test_in_range_rejects_a_bound_without_operator():
    with pytest.raises(ValueError, match="Invalid value for argument `bounds`"):
        kc.in_range("3.15.1", ("3.15",))


def test_range_warning_is_one_line_naming_the_range_and_version():
    assert kc.range_warning("3.15.1") is None
    assert kc.range_warning(None) is None
    line = kc.range_warning("3.17.0")
    assert "\n" not in line
    assert "Keras 3.17.0" in line and ">=3.10, <3.17" in line and "applied anyway" in line


def test_describe_keras_reads_the_imported_module(monkeypatch):
    monkeypatch.setitem(sys.modules, "keras", types.SimpleNamespace(__version__="3.15.1"))
    assert kc.describe_keras() == "Keras 3.15.1"


def test_describe_keras_without_keras(monkeypatch):
    monkeypatch.setattr(kc, "_keras_version", lambda: None)
    assert kc.describe_keras() == "Keras not installed"


# --- apply() once ---------------------------------------------------------------------------


@pytest.fixture
def fake_keras(monkeypatch):
    """apply() with recording corrections instead of Keras' (and a fresh once-only state)."""
    calls = []
    monkeypatch.setattr(kc, "_applied", None)
    monkeypatch.setattr(kc, "_tensorflow_backend", lambda: True)
    monkeypatch.setattr(kc, "CORRECTIONS", {
        "first": lambda: calls.append("first") or True,
        "second": lambda: calls.append("second") or True})

    def with_version(version):
        monkeypatch.setattr(kc, "_keras_version", lambda: version)
        return calls
    return with_version


def test_apply_applies_each_correction_once(fake_keras):
    calls = fake_keras("3.15.1")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert kc.apply() == ["first", "second"]
        assert kc.apply() == ["first", "second"]
    assert calls == ["first", "second"]


def test_apply_outside_the_range_warns_once_and_still_applies(fake_keras):
    calls = fake_keras("3.17.0")
    with pytest.warns(TFDistWarning) as record:
        assert kc.apply() == ["first", "second"]
    assert len(record) == 1
    assert "(>=3.10, <3.17)" in str(record[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert kc.apply() == ["first", "second"]
    assert calls == ["first", "second"]


@pytest.mark.parametrize("version", [None, "2.15.0"])
def test_apply_without_keras_3_does_nothing(fake_keras, version):
    calls = fake_keras(version)
    assert kc.apply() == []
    assert kc.apply() == []
    assert calls == []


def test_apply_with_another_backend_does_nothing(fake_keras, monkeypatch):
    calls = fake_keras("3.15.1")
    monkeypatch.setattr(kc, "_tensorflow_backend", lambda: False)
    assert kc.apply() == []
    assert calls == []


@pytest.fixture(autouse=True)
def no_multi_worker_lookup(monkeypatch):
    """_replace checks Keras' multi-worker test exists: a stand-in trainer module has it."""
    trainer = types.SimpleNamespace(_collective_all_reduce_multi_worker=lambda strategy: False)
    monkeypatch.setattr(kc, "_trainer_module", lambda: trainer)


def _replace(owner, name, correction, wrap):
    return kc._replace(lambda: owner, name, correction, wrap, where="Owner", risk="demo")


def test_replace_never_wraps_twice():
    class Owner:
        def method(self):
            return "original"

    original = Owner.method
    calls = []

    def wrap(function):
        def method(self):
            calls.append(1)
            return function(self)
        return method

    assert _replace(Owner, "method", "demo", wrap) is True
    assert _replace(Owner, "method", "demo", wrap) is True    # in place, not wrapped again
    assert Owner().method() == "original" and calls == [1]
    assert Owner.method.__wrapped__ is original
    assert getattr(Owner.method, kc._MARK) == "demo"
    assert Owner.method.__name__ == "method"


def test_two_corrections_wrap_one_function_each_once_the_later_outside():
    class Owner:
        def method(self):
            return ["original"]

    original = Owner.method

    def wrap_with(label):
        def wrap(function):
            def method(self):
                return [label] + function(self)
            return method
        return wrap

    assert kc.corrections_on(original) == []
    for label in ("inner", "outer", "inner", "outer"):
        assert _replace(Owner, "method", label, wrap_with(label)) is True
    assert Owner().method() == ["outer", "inner", "original"]
    assert kc.corrections_on(Owner.method) == ["outer", "inner"]
    assert Owner.method.__wrapped__.__wrapped__ is original


def test_the_corrections_and_their_order():
    """read_variables_in_logs comes after mean_logs_across_workers: both wrap
    reduce_per_replica, and the outer one must see the variables first."""
    assert list(kc.CORRECTIONS) == [
        "build_from_local_batch", "mean_logs_across_workers", "read_variables_in_logs",
        "defer_build_without_call", "agree_on_finite_grads", "mean_moving_statistics",
        "share_global_seed_generator"]


def test_every_correction_has_a_docstring_naming_an_upstream_issue():
    for name, correction in kc.CORRECTIONS.items():
        assert correction.__name__ == name
        assert "keras-team/keras#" in correction.__doc__


# --- hints: messages observed with Keras 3.15.1, tf-keras 2.21, TF 2.21 ----------------------

# TF_USE_LEGACY_KERAS=1 (tf.keras is tf-keras) and `import keras` (Keras 3) in one process.
MIXED = {
    "Keras 3 model compiled with a tf-keras optimizer": (
        "ValueError", "Could not interpret optimizer identifier: "
        "<tf_keras.src.optimizers.adam.Adam object at 0x7f00b4203e50>"),
    "tf-keras model compiled with a Keras 3 optimizer": (
        "ValueError", "Could not interpret optimizer identifier: "
        "<keras.src.optimizers.adam.Adam object at 0x7f00b4407fd0>"),
    "Keras 3 Sequential given a tf-keras layer": (
        "ValueError", "Only instances of `keras.Layer` can be added to a Sequential model. "
        "Received: <tf_keras.src.layers.core.dense.Dense object at 0x7f00b4383a50> "
        "(of type <class 'tf_keras.src.layers.core.dense.Dense'>)"),
    "tf-keras Sequential given a Keras 3 layer": (
        "TypeError", "The added layer must be an instance of class Layer. Received: "
        "layer=<Dense name=dense_7, built=False> of type "
        "<class 'keras.src.layers.core.dense.Dense'>."),
    "tf-keras layer called on a Keras 3 Input": (
        "AttributeError", "'tuple' object has no attribute 'rank'"),
    "tf-keras optimizer applied to a Keras 3 model's variables": (
        "AttributeError", "'Variable' object has no attribute '_unique_id'"),
    "Keras 3 callback passed to a tf-keras fit": (
        "AttributeError", "'EarlyStopping' object has no attribute "
        "'_implements_train_batch_hooks'"),
}
TF_KERAS_LOADS_KERAS_3_FILE = (
    "TypeError", "Error when deserializing class 'InputLayer' using config={'batch_shape': "
    "[None, 4], 'dtype': 'float32', 'sparse': False, 'ragged': False, 'name': "
    "'input_layer_7', 'optional': False}.\n\nException encountered: Unrecognized keyword "
    "arguments: ['batch_shape']")
# Keras 3 fit on 2 MWMS workers without the corrections (the tensor dump is shortened).
PER_REPLICA = (
    "ValueError", "Attempt to convert a value (PerReplica:{\n  0: <tf.Tensor: shape=(8, 4), "
    "dtype=float32, numpy=\narray([[ 1.0868307 , -0.05060406, -0.28312507,  1.6432517 ],\n"
    "       [-0.00721136, -0.5611981 , -0.8676168 ,  3.0660367 ]],\n      dtype=float32)>\n"
    "}) with an unsupported type (<class 'tensorflow.python.distribute.values.PerReplica'>) "
    "to a Tensor.")
PER_REPLICA_DICT = (
    "ValueError", "Attempt to convert a value ({'a': PerReplica:{\n  0: <tf.Tensor: "
    "shape=(8, 2), dtype=float32, numpy=\narray([[ 0.12573022, -0.13210486]], "
    "dtype=float32)>\n}, 'b': PerReplica:{\n  0: <tf.Tensor: shape=(8, 2), dtype=float32, "
    "numpy=\narray([[ 0.64042264,  0.10490011]], dtype=float32)>\n}}) with an unsupported "
    "type (<class 'dict'>) to a Tensor.")
SCALAR_AXIS_0 = (
    "ValueError", "Invalid reduction dimension 0 for input with 0 dimensions. for "
    "'{{node Sum_3}} = Sum[T=DT_FLOAT, Tidx=DT_INT32, keep_dims=false](div_no_nan, "
    "Sum_3/reduction_indices)' with input shapes: [], [] and with computed input tensors: "
    "input[1] = <0>.")
STEPS_PER_EXECUTION = (
    "InvalidArgumentError", "Graph execution error:\n\nDetected at node "
    "while/cond/Placeholder_2 defined at (most recent call last):\n  File \"trainer.py\", "
    "line 125, in wrapper\n\nYou must feed a value for placeholder tensor "
    "'while/body/_9/while/cond/then/_132/while/cond/Placeholder_2' with dtype int32\n\t "
    "[[{{node while/cond/Placeholder_2}}]] [Op:__inference_multi_step_on_iterator_995]")


@pytest.mark.parametrize("case", sorted(MIXED))
def test_hint_for_mixed_objects(case):
    hint = mixed_keras_hint(*MIXED[case])
    assert hint is not None and "\n" not in hint
    assert "mixes Keras 3" in hint and "tf-keras" in hint


def test_hint_for_a_keras_3_file_read_by_tf_keras():
    assert "keras.saving.load_model" in mixed_keras_hint(*TF_KERAS_LOADS_KERAS_3_FILE)


@pytest.mark.parametrize("error", [PER_REPLICA, PER_REPLICA_DICT, SCALAR_AXIS_0])
def test_hint_for_keras_3_on_workers_without_corrections(error):
    hint = mixed_keras_hint(*error)
    assert hint is not None and "\n" not in hint
    assert "corrections" in hint and "keras-team/keras#20585" in hint


def test_hint_for_steps_per_execution_accepts_a_qualified_type_name():
    name, message = STEPS_PER_EXECUTION
    for type_name in (name, "tensorflow.python.framework.errors_impl." + name):
        assert "steps_per_execution=1" in mixed_keras_hint(type_name, message)


@pytest.mark.parametrize("type_name, message", [
    ("ValueError", "Could not interpret optimizer identifier: adamx"),
    ("AttributeError", "'NoneType' object has no attribute 'rank'"),
    ("AttributeError", "'tuple' object has no attribute 'rank' (in my own code)"),
    ("ValueError", "Attempt to convert a value (<object object at 0x1>) with an unsupported "
                   "type (<class 'object'>) to a Tensor."),
    ("ValueError", "Invalid reduction dimension 0 for input with 0 dimensions."),
    ("TypeError", "Attempt to convert a value (PerReplica:{}) ..."),    # the wrong type
    ("RuntimeError", "Mixing different tf.distribute.Strategy objects"),
])
def test_no_hint_for_other_errors(type_name, message):
    assert mixed_keras_hint(type_name, message) is None
