"""The heart monitor of the controllers we launch pings a heart that has just connected
until it answers (cluster/launch/controller.py, JoinPings), instead of leaving it to the
next beat: an engine counts as registered at its heart's first answer.

Real zmq sockets and ipyparallel's own Heart (the device an engine answers pings with);
the monitor's beat is set to a minute, so only the join pings can reach the heart within
the test's deadline.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
import zmq
from ipyparallel.controller.heartmonitor import Heart, HeartMonitor
from tfmw_notebook.cluster.launch.controller import ping_joining_hearts, register_at_first_answer
from zmq.eventloop.zmqstream import ZMQStream

pytestmark = pytest.mark.unit

DEADLINE_SECONDS = 20.0


class Monitor(HeartMonitor):
    """ipyparallel's monitor whose beat never comes in a test, and what it would tell the
    hub recorded."""

    def start(self):   # the hub's subscription and the beat left out
        self.pong_stream.on_recv(self.handle_pong)
        self.tic = time.monotonic()

    def handle_new_hearts(self, hearts):
        self.told = getattr(self, "told", []) + sorted(hearts)
        self.hearts.update(hearts)


class MonitorThread(threading.Thread):
    """A monitor on its own event loop, as in the controller's heart monitor process."""

    def __init__(self, context: zmq.Context):
        super().__init__(daemon=True)
        self.context = context
        self.ready = threading.Event()

    def run(self):
        self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.loop)
        ping = self.context.socket(zmq.PUB)
        pong = self.context.socket(zmq.ROUTER)
        self.ping_url = f"tcp://127.0.0.1:{ping.bind_to_random_port('tcp://127.0.0.1')}"
        self.pong_url = f"tcp://127.0.0.1:{pong.bind_to_random_port('tcp://127.0.0.1')}"
        self.monitor = Monitor(ping_stream=ZMQStream(ping), pong_stream=ZMQStream(pong),
                               period=60_000)
        self.monitor.start()
        self.ready.set()
        self.loop.run_forever()

    def stop(self):
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.join(5)


def wait_for(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return False


@pytest.mark.timeout(60)
def test_a_heart_that_connects_is_pinged_until_it_answers():
    register_at_first_answer(Monitor)
    ping_joining_hearts(Monitor)
    context = zmq.Context()
    thread = MonitorThread(context)
    thread.start()
    try:
        assert thread.ready.wait(DEADLINE_SECONDS)
        monitor = thread.monitor
        assert not monitor.join_pings.pinging
        Heart(thread.ping_url, thread.pong_url, heart_id=b"engine-a").start()
        assert wait_for(lambda: getattr(monitor, "told", []) == [b"engine-a"],
                        DEADLINE_SECONDS), "the new heart was not pinged before the next beat"
        # Known now: the pings stop (the beat, a minute away, takes over).
        assert wait_for(lambda: not monitor.join_pings.pinging, DEADLINE_SECONDS)
        Heart(thread.ping_url, thread.pong_url, heart_id=b"engine-b").start()
        assert wait_for(lambda: getattr(monitor, "told", []) == [b"engine-a", b"engine-b"],
                        DEADLINE_SECONDS), "a second heart, joining later, was not pinged"
    finally:
        thread.stop()
        context.destroy(linger=0)
