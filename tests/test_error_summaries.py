"""The one line that names a worker's error says what went wrong, never a header.

The messages and tracebacks below are real: captured from TensorFlow 2.21, tf-keras 2.21
and Keras 3.15.1 in plain processes and on an ipyparallel 9.2 engine (RemoteError's
`ename`, `evalue` and `traceback`), shortened only where noted.
"""

import pytest
from ipyparallel.error import RemoteError
from tfmw_notebook.errors import SUMMARY_WIDTH, remote_summary

pytestmark = pytest.mark.unit

PLEASE_USE = ("ValueError: Please use `tf.keras.losses.Reduction.SUM` or "
              "`tf.keras.losses.Reduction.NONE` for loss reduction when losses are used with "
              "`tf.distribute.Strategy`, except for specifying losses in `Model.compile()` for "
              "use by the built-in training looop `Model.fit()`.")

# A tf-keras loss with the default reduction, called in a tf.function under a strategy
# (DESIGN fact 29): str() of the exception, and the RemoteError's evalue alike.
IN_USER_CODE = (
    'in user code:\n\n'
    '    File "/tmp/ippcap.py", line 13, in step  *\n'
    '        loss = lossf(y, model(x))\n'
    '    File "/work/main/.venv/lib/python3.11/site-packages/tf_keras/src/losses.py", '
    'line 157, in __call__  **\n'
    '        reduction = self._get_reduction()\n'
    '    File "/work/main/.venv/lib/python3.11/site-packages/tf_keras/src/losses.py", '
    'line 208, in _get_reduction\n'
    '        raise ValueError(\n\n'
    f'    {PLEASE_USE}\n'
    '    Please see https://www.tensorflow.org/tutorials/distribute/custom_training for more '
    'details.\n')

# The RemoteError's traceback of that error (IPython's colours dropped; its first frames,
# ipyparallel's and the user's, left out).
IN_USER_CODE_TRACEBACK = (
    "File /work/main/.venv/lib/python3.11/site-packages/tf_keras/src/losses.py:208, in "
    "Loss._get_reduction(self)\n"
    "--> 208     raise ValueError(\n"
    "    209         \"Please use `tf.keras.losses.Reduction.SUM` or \"\n\n"
    f"ValueError: {IN_USER_CODE}")

# model.fit of tf-keras whose loss function raises: Keras' own frame comes first.
FIT_IN_USER_CODE = (
    'in user code:\n\n'
    '    File "/work/main/.venv/lib/python3.11/site-packages/tf_keras/src/engine/training.py",'
    ' line 1398, in train_function  *\n'
    '        return step_function(self, iterator)\n'
    '    File "/tmp/cap2.py", line 28, in bad_loss  *\n'
    '        raise ValueError("loss exploded")\n\n'
    '    ValueError: loss exploded\n')

# A tf-keras layer whose call() raises, and the same layer under Keras 3.
TF_KERAS_LAYER_CALL = (
    'Exception encountered when calling layer "bad" (type Bad).\n\n'
    'in user code:\n\n'
    '    File "/tmp/cap3.py", line 7, in call  *\n'
    '        raise ValueError("scale must be positive")\n\n'
    '    ValueError: scale must be positive\n\n\n'
    'Call arguments received by layer "bad" (type Bad):\n'
    '  \u2022 x=tf.Tensor(shape=(None, 3), dtype=float32)')
KERAS3_LAYER_CALL = (
    "Exception encountered when calling Sequential.call().\n\n"
    "\x1b[1mInput 0 with name 'None' of layer 'dense' is incompatible with the layer: "
    "expected axis -1 of input shape to have value 3, but received input with shape "
    "(2, 5)\x1b[0m\n\n"
    "Arguments received by Sequential.call():\n"
    "  \u2022 inputs=tf.Tensor(shape=(2, 5), dtype=float32)\n"
    "  \u2022 training=None\n"
    "  \u2022 mask=None\n"
    "  \u2022 kwargs=<class 'inspect._empty'>")

# A generator behind Dataset.from_generator raising `RuntimeError(...) from KeyError`:
# TensorFlow's UnknownError carries the generator's whole chained traceback.
FROM_GENERATOR = (
    "{{function_node __wrapped__IteratorGetNext_output_types_1_device_/job:localhost/"
    "replica:0/task:0/device:CPU:0}} RuntimeError: bad record 2\n"
    "Traceback (most recent call last):\n\n"
    '  File "/tmp/cap2.py", line 18, in gen\n'
    '    {}["path"]\n'
    "    ~~^^^^^^^^\n\n"
    "KeyError: 'path'\n\n\n"
    "The above exception was the direct cause of the following exception:\n\n\n"
    "Traceback (most recent call last):\n\n"
    '  File "/work/main/.venv/lib/python3.11/site-packages/tensorflow/python/ops/'
    'script_ops.py", line 269, in __call__\n'
    "    ret = func(*args)\n"
    "          ^^^^^^^^^^^\n\n"
    '  File "/tmp/cap2.py", line 20, in gen\n'
    '    raise RuntimeError("bad record 2") from e\n\n'
    "RuntimeError: bad record 2\n\n\n"
    "\t [[{{node PyFunc}}]] [Op:IteratorGetNext] name: ")

# A bare `raise RuntimeError from e` on an engine, and one raised while handling another
# (without IPython's colours or ipyparallel's own frames); chained_traceback() writes the
# first with a message too, which changes only its raise line and last line.
CHAINED_TRACEBACK = (
    "---------------------------------------------------------------------------\n"
    "KeyError                                  Traceback (most recent call last)\n"
    "File /tmp/ippcap2.py:4, in bare_from.<locals>.load()\n"
    "      3 def load():\n"
    "----> 4     return {}[\"learning_rate\"]\n\n"
    "KeyError: 'learning_rate'\n\n"
    "The above exception was the direct cause of the following exception:\n\n"
    "RuntimeError                              Traceback (most recent call last)\n"
    "File /tmp/ippcap2.py:8, in bare_from()\n"
    "      6     load()\n"
    "      7 except KeyError as e:\n"
    "----> 8     raise RuntimeError")

CONTEXT_TRACEBACK = (
    "ZeroDivisionError                         Traceback (most recent call last)\n"
    "File /tmp/ippcap.py:26, in chained_context()\n"
    "     25 try:\n"
    "---> 26     1/0\n"
    "     27 except ZeroDivisionError:\n\n"
    "ZeroDivisionError: division by zero\n\n"
    "During handling of the above exception, another exception occurred:\n\n"
    "RuntimeError                              Traceback (most recent call last)\n"
    "File /tmp/ippcap.py:28, in chained_context()\n"
    "---> 28     raise RuntimeError\n\n"
    "RuntimeError: ")


def chained_traceback(message: str) -> str:
    """CHAINED_TRACEBACK for `raise RuntimeError(message) from e` (bare with "")."""
    return (CHAINED_TRACEBACK + (f"({message!r})" if message else "")
            + f" from e\n\nRuntimeError: {message}")


def remote(ename: str, evalue: str, traceback: str = "") -> RemoteError:
    return RemoteError(ename, evalue, traceback)


def test_a_tf_function_error_is_named_by_its_last_line():
    # Its final period dropped: every caller goes on after it ("...; its traceback:").
    assert remote_summary(ValueError(IN_USER_CODE)) == PLEASE_USE.removesuffix(".")
    assert remote_summary(ValueError(FIT_IN_USER_CODE)) == "ValueError: loss exploded"


def test_a_workers_remote_error_is_named_by_the_cause_in_its_evalue():
    error = remote("ValueError", IN_USER_CODE, IN_USER_CODE_TRACEBACK)
    assert remote_summary(error) == PLEASE_USE.removesuffix(".")
    assert remote_summary(remote("NameError", "name 'x' is not defined")) == (
        "NameError: name 'x' is not defined")


def test_keras_layer_call_errors_are_named_by_what_the_layer_raised():
    assert remote_summary(ValueError(TF_KERAS_LAYER_CALL)) == (
        "ValueError: scale must be positive")
    assert remote_summary(remote("ValueError", KERAS3_LAYER_CALL)) == (
        "ValueError: Input 0 with name 'None' of layer 'dense' is incompatible with the "
        "layer: expected axis -1 of input shape to have value 3, but received input with "
        "shape (2, 5)")


def test_a_chained_error_is_named_by_its_outermost_exception():
    # In a message (TensorFlow carrying a generator's traceback): the error it raised.
    assert remote_summary(remote("UnknownError", FROM_GENERATOR)) == (
        "RuntimeError: bad record 2")
    said = chained_traceback("could not read the config")
    assert remote_summary(remote("RuntimeError", "could not read the config", said)) == (
        "RuntimeError: could not read the config")
    # An outermost exception that says nothing is named with what it was raised from.
    assert remote_summary(remote("RuntimeError", "", chained_traceback(""))) == (
        "RuntimeError (from KeyError: 'learning_rate')")
    assert remote_summary(remote("RuntimeError", "", CONTEXT_TRACEBACK)) == (
        "RuntimeError (while handling ZeroDivisionError: division by zero)")


def test_a_local_chained_error_says_nothing_is_named_with_its_cause():
    def raise_bare():
        try:
            {}["learning_rate"]
        except KeyError as exc:
            raise RuntimeError from exc

    with pytest.raises(RuntimeError) as raised:
        raise_bare()
    assert remote_summary(raised.value) == "RuntimeError (from KeyError: 'learning_rate')"


def test_a_very_long_cause_is_cut_at_a_word():
    words = " ".join(["layer dense_7 expected a float32 tensor"] * 30)
    summary = remote_summary(remote("TypeError", words + "\nsecond line"))
    assert summary.endswith(" ...") and len(summary) <= SUMMARY_WIDTH, summary
    assert ("TypeError: " + words).startswith(summary[:-len(" ...")]), summary
    assert summary[:-len(" ...")].endswith(("layer", "dense_7", "expected", "a", "float32",
                                           "tensor")), summary
