"""What a call into the workers says when an engine does not answer in time: whether it is
still there (busy or stuck) or gone, from the controller's list of engines."""

from __future__ import annotations

import pytest
from tfmw_notebook import ClusterSetupError
from tfmw_notebook.cluster.cells.worker_calls import WorkerCalls

pytestmark = pytest.mark.unit


class SilentFuture:
    def wait(self, timeout: float) -> bool:
        return False


class AnsweredFuture:
    def wait(self, timeout: float) -> bool:
        return True

    def get(self) -> str:
        return "done"


class Group:
    def __init__(self, registered, answers: bool = True):
        self._registered = registered
        self._answers = answers

    def controller_answers(self) -> bool:
        return self._answers

    def registered(self) -> set[int]:
        if isinstance(self._registered, Exception):
            raise self._registered
        return self._registered


def silent_engine_error(registered, answers: bool = True) -> str:
    calls = WorkerCalls(Group(registered, answers), timeout=0)
    with pytest.raises(ClusterSetupError) as caught:
        calls._gather([0, 1], [AnsweredFuture(), SilentFuture()], "handshake", None)
    return str(caught.value)


def test_a_silent_engine_still_registered_is_called_busy_or_stuck():
    assert silent_engine_error({0, 1}) == (
        "engine 1 did not finish the handshake within 0 s (it is still registered with the "
        "controller: busy or stuck); raise the timeout or check that engine")


def test_a_silent_engine_gone_from_the_controller_is_called_ended():
    message = silent_engine_error({0})
    assert "engine 1 did not finish the handshake within 0 s (it is no longer registered " \
           "with the controller: its process ended)" in message
    assert "\n" not in message


def test_a_controller_that_does_not_answer_is_said_so():
    assert "(the controller does not answer)" in silent_engine_error(OSError("gone"))


def test_an_engine_the_client_still_lists_behind_a_dead_controller_is_not_called_busy():
    # The client keeps its list of engines after the controller ended (ipcluster's early
    # shutdown, say): the controller is asked first.
    message = silent_engine_error({0, 1}, answers=False)
    assert "(the controller does not answer)" in message and "busy" not in message
