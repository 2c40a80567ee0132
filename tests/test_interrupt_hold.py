"""While fresh workers start, the first interrupt is held and the second one stops it."""

import os
import signal
import threading
import time

import pytest
from tfmw_notebook.cluster.cells.interrupt_hold import one_interrupt_held

pytestmark = pytest.mark.unit


def press() -> None:
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.05)   # the handler runs at the next bytecode boundary


def test_the_first_press_is_held_with_a_line_and_the_work_goes_on(capsys):
    finished = False
    with one_interrupt_held("restarting the workers"):
        press()
        finished = True
    assert finished
    assert capsys.readouterr().err == (
        "tfdist: restarting the workers; interrupt again to stop without them\n")


def test_a_second_press_stops_it():
    with pytest.raises(KeyboardInterrupt), one_interrupt_held("restarting the workers"):
        press()
        press()
        pytest.fail("the second press did not stop the work")


def test_the_previous_handler_comes_back():
    before = signal.getsignal(signal.SIGINT)
    with one_interrupt_held("restarting the workers"):
        assert signal.getsignal(signal.SIGINT) is not before
    assert signal.getsignal(signal.SIGINT) is before


def test_off_the_main_thread_nothing_changes():
    seen = []

    def elsewhere():
        with one_interrupt_held("restarting the workers"):
            seen.append(signal.getsignal(signal.SIGINT))

    before = signal.getsignal(signal.SIGINT)
    thread = threading.Thread(target=elsewhere)
    thread.start()
    thread.join(timeout=10)
    assert seen == [before]
