"""The restart's wait for the chief's checkpoint write: how long, and when it gives up."""

from __future__ import annotations

import threading
import time

import pytest
from tfmw_notebook.cluster.cells.write_wait import let_write_end
from tfmw_notebook.protocol.events import WRITING_KEY

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]


def test_no_write_under_way_is_no_wait():
    told = []
    began = time.monotonic()
    assert let_write_end({}, lambda: False, told.append)
    assert let_write_end({WRITING_KEY: False}, lambda: False, told.append)
    assert time.monotonic() - began < 0.05 and told == []


def test_the_wait_ends_when_the_chief_says_its_write_ended_and_says_why_it_waits():
    data, told = {WRITING_KEY: True}, []
    threading.Timer(1.3, data.update, [{WRITING_KEY: False}]).start()
    began = time.monotonic()
    assert let_write_end(data, lambda: False, told.append)
    assert 1.2 < time.monotonic() - began < 3
    assert len(told) == 1 and "worker 0" in told[0] and "interrupt again" in told[0]


def test_a_chief_that_is_gone_or_a_write_that_never_ends_is_not_waited_for_long():
    began = time.monotonic()
    assert not let_write_end({WRITING_KEY: True}, lambda: True, print)
    assert time.monotonic() - began < 0.5
    assert not let_write_end({WRITING_KEY: True}, lambda: False, lambda text: None, seconds=0.3)
    assert time.monotonic() - began < 1.5

    def controller_gone() -> bool:
        raise ConnectionError("the controller does not answer")

    assert not let_write_end({WRITING_KEY: True}, controller_gone, print)
    assert time.monotonic() - began < 2


def test_a_second_interrupt_goes_on_without_the_write():
    def interrupted() -> bool:
        raise KeyboardInterrupt

    assert not let_write_end({WRITING_KEY: True}, interrupted, print)
