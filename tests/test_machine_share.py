"""tests/machine_share.py: an `alone` test starts once the test beside it has ended, and the
test after it waits until it is done; without xdist nothing waits. Two MachineShare objects
stand for the two xdist processes (flock locks belong to an open file, so two objects in one
process exclude each other as two processes do)."""

import threading
import time
from types import SimpleNamespace

import pytest

from machine_share import MachineShare

pytestmark = pytest.mark.unit

MODULE, OTHER_MODULE = object(), object()


def item(alone: bool, module=MODULE):
    marker = object() if alone else None
    return SimpleNamespace(module=module, get_closest_marker=lambda name: marker)


def process(tmp_path, worker=True):
    option = SimpleNamespace(basetemp=str(tmp_path / "popen-gw0"))
    config = SimpleNamespace(option=option, **({"workerinput": {}} if worker else {}))
    return MachineShare(config)


def run_in_thread(share, items, log, name):
    """One xdist process running `items` in turn; `log` gets (name, i, "start"/"end")."""
    def run():
        for i, (current, following) in enumerate(zip(items, items[1:] + [None])):
            with share.around(current, following):
                log.append((name, i, "start"))
                time.sleep(0.3)
                log.append((name, i, "end"))
    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_an_alone_test_waits_for_the_test_beside_it_and_the_next_one_waits_for_it(tmp_path):
    first, second, log = process(tmp_path), process(tmp_path), []
    beside = run_in_thread(first, [item(False), item(False)], log, "plain")
    time.sleep(0.1)
    alone = run_in_thread(second, [item(True, OTHER_MODULE)], log, "alone")
    for thread in (beside, alone):
        thread.join(timeout=10)
    assert log == [("plain", 0, "start"), ("plain", 0, "end"), ("alone", 0, "start"),
                   ("alone", 0, "end"), ("plain", 1, "start"), ("plain", 1, "end")]


def test_a_module_of_alone_tests_keeps_the_machine_from_first_to_last(tmp_path):
    first, second, log = process(tmp_path), process(tmp_path), []
    alone = run_in_thread(first, [item(True), item(True), item(True)], log, "alone")
    time.sleep(0.1)
    plain = run_in_thread(second, [item(False, OTHER_MODULE)], log, "plain")
    alone.join(timeout=10)
    plain.join(timeout=10)
    assert log[-2:] == [("plain", 0, "start"), ("plain", 0, "end")], log


def test_tests_that_are_not_alone_run_beside_each_other(tmp_path):
    first, second, log = process(tmp_path), process(tmp_path), []
    threads = [run_in_thread(first, [item(False)], log, "a"),
               run_in_thread(second, [item(False)], log, "b")]
    for thread in threads:
        thread.join(timeout=10)
    assert [event for _, _, event in log[:2]] == ["start", "start"], log


def test_without_xdist_nothing_is_locked(tmp_path):
    share = process(tmp_path, worker=False)
    with share.around(item(True), None):
        assert share.room is None and not list(tmp_path.iterdir())
