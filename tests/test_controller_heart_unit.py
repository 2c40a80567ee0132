"""The controller we launch takes an engine's heart as registered at its first answer
(cluster/launch/controller.py), not one heart-monitor period later, and counts it as a
heart that answered at the next beat."""

from __future__ import annotations

import pytest
from ipyparallel.controller.heartmonitor import HeartMonitor
from tfmw_notebook.cluster.launch.controller import register_at_first_answer

pytestmark = pytest.mark.unit


class Monitor(HeartMonitor):
    """ipyparallel's monitor without sockets: what it would tell the hub is recorded."""

    def handle_new_hearts(self, hearts):
        self.told = getattr(self, "told", []) + [sorted(hearts)]
        self.hearts.update(hearts)


def test_a_new_heart_is_registered_at_its_first_answer_once():
    register_at_first_answer(Monitor)
    monitor = Monitor()
    ping = str(monitor.lifetime).encode("ascii")
    monitor.handle_pong([b"engine-a", ping])
    assert monitor.told == [[b"engine-a"]] and b"engine-a" in monitor.hearts
    monitor.handle_pong([b"engine-a", ping])   # a second answer: already known
    assert monitor.told == [[b"engine-a"]]
    assert monitor.hearts.intersection(monitor.responses) == {b"engine-a"}   # beat: answered


def test_an_answer_to_an_unknown_ping_registers_nothing():
    register_at_first_answer(Monitor)
    monitor = Monitor()
    monitor.handle_pong([b"engine-b", b"12345.0"])
    assert getattr(monitor, "told", []) == [] and not monitor.hearts
