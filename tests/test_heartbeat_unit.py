"""The worker's heartbeat thread (worker/liveness/heartbeat.py): a beat every period while a
block runs, the first one period in, none after the block; a block's start and end do not
wake the thread unless it idles. Waits have deadlines; no assertion depends on how fast
this machine is."""

from __future__ import annotations

import time

import pytest
from tfmw_notebook.worker.liveness import heartbeat

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]
PERIOD = 0.1


@pytest.fixture
def beater(monkeypatch):
    fresh = heartbeat._Beater()
    monkeypatch.setattr(heartbeat, "_beater", fresh)
    return fresh


class Beats:
    """What a Heartbeat publishes, with when."""

    def __init__(self):
        self.times: list[float] = []
        self.numbers: list[int] = []

    def __call__(self, beat: dict) -> None:
        self.times.append(time.monotonic())
        self.numbers.append(beat[heartbeat.ALIVE_KEY])

    def wait_for(self, count: int, seconds: float = 20.0) -> None:
        deadline = time.monotonic() + seconds
        while len(self.times) < count:
            assert time.monotonic() < deadline, f"{len(self.times)} beats of {count}"
            time.sleep(0.01)


def test_a_block_beats_from_one_period_in_and_not_after_it_ends(beater):
    beats = Beats()
    began = time.monotonic()
    with heartbeat.Heartbeat(beats, period=PERIOD):
        beats.wait_for(2)
    sent = len(beats.times)
    assert beats.times[0] >= began + PERIOD and beats.numbers == list(range(1, sent + 1))
    time.sleep(3 * PERIOD)
    assert len(beats.times) == sent   # the block ended: no beat for it


def test_short_blocks_one_after_another_do_not_wake_the_thread_each_time(beater):
    beats = Beats()
    with heartbeat.Heartbeat(beats, period=60.0):   # starts the thread, its beat due in 60 s
        deadline = time.monotonic() + 20
        while beater.waits < 1:   # until the thread waits for that beat
            assert time.monotonic() < deadline
            time.sleep(0.01)
    began = beater.wakes
    for _ in range(50):
        with heartbeat.Heartbeat(beats, period=60.0):
            pass
    assert beater.wakes == began and beats.times == []   # before: two wakes a block, 100


def test_a_block_after_the_thread_idled_still_beats_one_period_in(beater):
    beats = Beats()
    with heartbeat.Heartbeat(beats, period=PERIOD):
        pass
    time.sleep(3 * PERIOD)   # the thread goes idle: it waits with no deadline
    began = time.monotonic()
    with heartbeat.Heartbeat(beats, period=PERIOD):
        beats.wait_for(1)
    assert beats.times[0] >= began + PERIOD


def test_the_check_runs_after_each_beat(beater):
    checked = []
    beats = Beats()
    with heartbeat.Heartbeat(beats, period=PERIOD, check=lambda: checked.append(1)):
        beats.wait_for(2)
        deadline = time.monotonic() + 20
        while len(checked) < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert checked
