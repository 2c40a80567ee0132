"""One engine's reply to a broadcast call, read off ipyparallel's message future for that
engine (cluster/cells/engine_reply.py): done, error, value, output, as an AsyncResult of
that engine gives them."""

from __future__ import annotations

from concurrent.futures import Future

import pytest
from ipyparallel import error
from ipyparallel.client.futures import MessageFuture
from tfmw_notebook.cluster.cells.engine_reply import EngineReply

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]


def message_future() -> MessageFuture:
    future = MessageFuture("msg-1")
    future.output = Future()
    future.output.metadata = {"stdout": "", "stderr": "", "data": {}}
    return future


def test_a_value_and_the_output_that_follows_it():
    child = message_future()
    reply = EngineReply(child, 3)
    assert not reply.done() and reply.exception() is None
    assert not reply.wait(0.01)
    with pytest.raises(error.TimeoutError):
        reply.get(timeout=0.01)
    child.output.metadata["stdout"] = "hello\n"
    child.set_result({"display": None})
    assert reply.done() and reply.wait(0) and reply.exception() is None
    assert reply.get() == {"display": None} and reply.engine_id == 3
    assert not reply.wait_for_output(0.01)   # the reply came, the output has not ended
    child.output.set_result(None)
    assert reply.wait_for_output(0.01) and reply.metadata["stdout"] == "hello\n"


def test_a_remote_error_is_the_replys_exception_and_get_raises_it():
    child = message_future()
    raised = error.RemoteError("ValueError", "bad", "traceback")
    child.set_result(raised)   # how the client stores an engine's error
    reply = EngineReply(child)
    assert reply.exception() is raised
    with pytest.raises(error.RemoteError):
        reply.get()


def test_a_failed_message_future_is_the_replys_exception():
    child = message_future()
    child.set_exception(error.EngineError("Engine set stopped"))
    reply = EngineReply(child)
    assert isinstance(reply.exception(), error.EngineError)
    with pytest.raises(error.EngineError):
        reply.get(timeout=1)


def test_the_turn_signal_is_set_by_a_failed_reply_and_by_the_last_one_not_by_others():
    from tfmw_notebook.cluster.cells.engine_reply import turn_signal

    children = [message_future() for _ in range(3)]
    signal = turn_signal([EngineReply(child) for child in children])
    children[0].set_result({"display": None})
    assert not signal.is_set()   # one rank done, two running: nothing to turn for
    children[1].set_result(error.RemoteError("NameError", "x", "traceback"))
    assert signal.is_set()       # a rank raised: its traceback is shown at once
    signal.clear()
    children[2].set_result({"display": None})
    assert signal.is_set()       # the last reply: the cell is over


def test_no_turn_signal_for_replies_that_cannot_say_when_they_come():
    from tfmw_notebook.cluster.cells.engine_reply import turn_signal

    assert turn_signal([object()]) is None
