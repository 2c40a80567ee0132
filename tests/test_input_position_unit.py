"""Which fits get their input put back, and the resume line's words (input_position.py)."""

import pytest
from tfmw_notebook.worker.fits import input_position
from tfmw_notebook.worker.fits.input_position import Replay, _take

pytestmark = pytest.mark.unit


def test_a_fit_that_starts_where_it_asked_is_not_replayed():
    with input_position.watching(None, None, None):
        assert _take(0, 0) is None
    with input_position.watching(None, 3, None):   # --resume-from: the call itself starts at 3
        assert _take(3, 0) is None


def test_a_resumed_fit_replays_its_training_input_only():
    with input_position.watching(None, 0, None):
        assert _take(4, 7) == (4, 7)
        assert _take(0, 0) is None           # validation's input, later in the same fit
    with input_position.watching(None, 1, None):
        assert _take(1, 12) == (0, 12)       # mid-epoch, in the epoch the call began
    assert _take(4, 7) is None               # outside a fit: nothing


def test_the_resume_line_says_what_was_read_or_why_it_could_not_be():
    assert Replay(batches=90, seconds=0.42).line() == (
        "; its input goes on where it was (90 batches read again in 0.4 s)")
    assert "could not be put back where it was (it ended" in Replay(
        batches=3, problem="it ended after 3 of the 9 batches to skip").line()


class _Steps:
    def __init__(self, steps):
        self.steps = steps

    def numpy(self):
        return self.steps


class _Model:
    def __init__(self, steps):
        self.optimizer = type("Optimizer", (), {})()
        self.optimizer.iterations = _Steps(steps)


def test_keras3_resumes_at_the_epoch_and_batch_of_the_restored_step():
    model = _Model(40)
    with input_position.watching(model, 0, None):
        model.optimizer.iterations = _Steps(40 + 95)     # the backup's optimizer, loaded
        assert input_position.resume_at(model, 30) == 3
        assert input_position._fit.plan == (3, 5)
    with input_position.watching(model, 0, None):        # nothing loaded: not resumed
        assert input_position.resume_at(model, 30) is None
    with input_position.watching(_Model(0), 0, None):
        unknown = _Model(12)
        assert input_position.resume_at(unknown, None) is None
        assert "not known" in input_position.outcome().problem
