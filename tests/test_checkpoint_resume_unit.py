"""Where a fit continued by `--resume-from` is put (input_position.py's `resuming`), and
what its checkpoints record of their run's start (checkpointing.run_began)."""

import pytest
from tfmw_notebook.worker.fits import input_position
from tfmw_notebook.worker.writes import checkpointing

pytestmark = pytest.mark.unit


class _Steps:
    def __init__(self, steps):
        self.steps = steps

    def numpy(self):
        return self.steps


class _Model:
    def __init__(self, steps):
        self.optimizer = type("Optimizer", (), {})()
        self.optimizer.iterations = _Steps(steps)


class _Handler:
    """What tf-keras' DataHandler holds that the position is put into."""

    def __init__(self, steps):
        self._inferred_steps, self._initial_epoch, self._initial_step = steps, 0, 0


def test_the_restored_step_counts_from_where_the_checkpoints_run_began():
    model = _Model(40 + 25)   # the run began at step 40 (an earlier fit); 25 steps since
    input_position.resuming(0, 40, 2)
    with input_position.watching(model, 0, None):
        assert input_position.resume_at(model, 10) == 2      # Keras 3
        assert input_position._fit.plan == (2, 5)
    input_position.resuming(0, 40, 2)
    with input_position.watching(model, 0, None):
        handler = _Handler(10)
        input_position._position_from_optimizer(handler)       # tf-keras
        assert (handler._initial_epoch, handler._initial_step) == (2, 5)


def test_a_checkpoint_that_does_not_record_its_start_counts_its_whole_epochs():
    model = _Model(7)   # whatever the optimizer says
    input_position.resuming(0, None, 3)
    with input_position.watching(model, 0, None):
        assert input_position.resume_at(model, 10) == 3
        assert input_position._fit.plan == (3, 0)


def test_an_unknown_epoch_length_resumes_at_the_checkpoints_epoch_and_says_why_not_exactly():
    model = _Model(30)
    input_position.resuming(0, 0, 3)
    with input_position.watching(model, 0, None):
        assert input_position.resume_at(model, None) == 3
        assert "not known" in input_position.outcome().problem
    input_position.resuming(0, 0, 3)
    with input_position.watching(model, 0, None):
        handler = _Handler(None)
        input_position._position_from_optimizer(handler)
        assert (handler._initial_epoch, handler._initial_step) == (3, 0)


def test_only_the_next_fit_is_resumed_and_its_checkpoints_record_the_runs_start():
    model = _Model(20)
    input_position.resuming(1, 10, 1)
    with input_position.watching(model, 1, None):
        assert checkpointing._run_start == {"epoch": 1, "step": 10}
    assert checkpointing._run_start is None
    with input_position.watching(model, 0, None):   # the cell's next fit: its own start
        assert checkpointing._run_start == {"epoch": 0, "step": 20}
        assert input_position.resume_at(model, 10) is None
