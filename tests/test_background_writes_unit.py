"""The writer thread of the automatic checkpoints (worker/writes/background_writes.py)."""

import threading
import time

import pytest
from tfmw_notebook.worker.writes import background_writes

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def nothing_in_flight():
    background_writes.wait()
    yield
    try:
        background_writes.wait()
    except Exception:
        pass


def test_a_write_runs_on_the_writer_thread_while_the_caller_goes_on():
    release, seen = threading.Event(), []

    def write():
        release.wait(5)
        seen.append(threading.current_thread().name)

    background_writes.hand_over(write)
    assert background_writes.in_flight() and seen == []   # the caller did not wait
    release.set()
    background_writes.wait()
    assert seen == [background_writes.WRITER_THREAD]
    assert not background_writes.in_flight()


def test_writes_run_one_at_a_time_in_order():
    order = []

    def write(index):
        def run():
            order.append(("begin", index))
            time.sleep(0.05)
            order.append(("end", index))
        return run

    for index in range(3):
        background_writes.hand_over(write(index))
    background_writes.wait()
    assert order == [(step, i) for i in range(3) for step in ("begin", "end")]


def test_a_failed_write_is_raised_by_the_next_hand_over_once_and_the_next_does_not_run():
    ran = []

    def failing():
        raise OSError(28, "No space left on device")

    background_writes.hand_over(failing)
    with pytest.raises(OSError, match="No space left"):
        background_writes.hand_over(lambda: ran.append(1))
    assert ran == []
    background_writes.wait()   # raised once only


def test_wait_raises_the_failure_of_the_last_write():
    background_writes.hand_over(lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        background_writes.wait()


def test_the_notebook_is_told_when_a_write_begins_and_when_it_ends():
    told, release = [], threading.Event()
    background_writes.tell_with(told.append)
    try:
        background_writes.hand_over(lambda: release.wait(5))
        assert told == [{"tfmw-writing": True}]      # before the write, from the caller
        release.set()
        background_writes.wait()
        assert told == [{"tfmw-writing": True}, {"tfmw-writing": False}]

        def failing_write():
            raise OSError("disk gone")

        background_writes.hand_over(failing_write)   # a failed write is told as ended too
        with pytest.raises(OSError):
            background_writes.wait()
        assert told[-1] == {"tfmw-writing": False}
    finally:
        background_writes.tell_with(None)


def test_after_the_cells_own_error_a_failed_write_is_said_on_stderr_not_raised(capsys):
    def failing_write():
        raise OSError("disk gone")

    background_writes.hand_over(failing_write)
    background_writes.wait_after_error()
    assert "a checkpoint write failed as well: OSError: disk gone" in capsys.readouterr().err
    assert not background_writes.in_flight()
