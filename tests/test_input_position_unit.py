"""Which fits get their input put back, and the resume line's words (input_position.py)."""

import pytest

from tfmw_notebook.worker import input_position
from tfmw_notebook.worker.input_position import Replay, _take

pytestmark = pytest.mark.unit


def test_a_fit_that_starts_where_it_asked_is_not_replayed():
    with input_position.watching(None, None):
        assert _take(0, 0) is None
    with input_position.watching(3, None):   # --resume-from: the call itself starts at 3
        assert _take(3, 0) is None


def test_a_resumed_fit_replays_its_training_input_only():
    with input_position.watching(0, None):
        assert _take(4, 7) == (4, 7)
        assert _take(0, 0) is None           # validation's input, later in the same fit
    with input_position.watching(1, None):
        assert _take(1, 12) == (0, 12)       # mid-epoch, in the epoch the call began
    assert _take(4, 7) is None               # outside a fit: nothing


def test_the_resume_line_says_what_was_read_or_why_it_could_not_be():
    assert Replay(batches=90, seconds=0.42).line() == (
        "; its input goes on where it was (90 batches read again in 0.4 s)")
    assert "could not be put back where it was (it ended" in Replay(
        batches=3, problem="it ended after 3 of the 9 batches to skip").line()
