"""The line the notebook adds under a training step the workers could not make run outside
`strategy.run` (magics/hints.py). Messages as TensorFlow 2.21 and tf-keras 2.21 raise them
on 2 workers (tests/test_custom_loops.py runs the legacy optimizer's for real)."""

import pytest
from tfmw_notebook.magics.hints import cross_replica_step_hint

pytestmark = pytest.mark.unit

LEGACY = ("`apply_gradients() cannot be called in cross-replica context. Use "
          "`tf.distribute.Strategy.run` to enter replica context. For more information, please "
          "see the docstring of `tf.distribute.get_replica_context`.")
HANDLE = ("DistributedVariable.handle is not available outside the replica context or a "
          "`tf.distribute.Strategy.update()` call.")
METRIC = ("SyncOnReadVariable does not support `assign_add` in cross-replica context when "
          "aggregation is set to `tf.VariableAggregation.SUM`.")


def test_a_legacy_optimizer_is_told_to_drop_legacy():
    hint = cross_replica_step_hint(LEGACY)
    assert hint is not None and "without `.legacy`" in hint and "strategy.run" in hint


@pytest.mark.parametrize("message", [HANDLE, METRIC, "'NoneType' object has no attribute "
                                                     "'merge_call'"])
def test_other_uncorrected_steps_are_told_to_use_strategy_run(message):
    hint = cross_replica_step_hint(message)
    assert hint is not None and "strategy.run(train_step" in hint and ".legacy" not in hint


@pytest.mark.parametrize("message", ["", "name 'x' is not defined",
                                     "Please use `tf.keras.losses.Reduction.SUM`"])
def test_other_errors_get_no_such_line(message):
    assert cross_replica_step_hint(message) is None
