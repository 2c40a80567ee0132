"""The spare pool's accounting (cluster/launch/standby.py): which registered engines are spares,
how many are on their way, what a refill launches. A stand-in launcher records what it is
asked to start; the real engines are in test_standby.py."""

from __future__ import annotations

import pytest
from tfmw_notebook.cluster.launch.standby import WarmStandby

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]


class RecordingLauncher:
    """What WarmStandby uses of ipyparallel's Cluster: engine sets and a start."""

    def __init__(self, fail: bool = False):
        self.engines: dict = {}
        self.started: list[tuple[int, dict]] = []
        self.fail = fail

    def start_engines_sync(self, n, **kwargs):
        if self.fail:
            raise RuntimeError("launcher down")
        self.started.append((n, kwargs))


def test_a_refill_launches_what_the_pool_lacks_with_the_groups_launch_settings():
    launcher, kwargs = RecordingLauncher(), {"environment": {"TF_USE_LEGACY_KERAS": "1"}}
    pool = WarmStandby(3, launcher, kwargs)
    assert pool.refill() == 3 and pool.refill() == 0            # nothing lacks the second time
    assert pool.take(1, registered={0, 5}, taken={0}) == [5]
    kwargs["environment"] = {"TF_USE_LEGACY_KERAS": "0"}         # the group's, changed later
    assert pool.refill() == 1
    assert launcher.started == [(3, {"environment": {"TF_USE_LEGACY_KERAS": "1"}}),
                                (1, {"environment": {"TF_USE_LEGACY_KERAS": "0"}})]


def test_a_restart_takes_registered_spares_oldest_first_and_counts_those_coming():
    pool = WarmStandby(3, RecordingLauncher(), {})
    pool.refill()                                                # 3 on their way
    workers_and_retired = {0, 1}
    registered = {0, 1, 7, 5}                                    # two spares registered
    assert pool.spares(registered, workers_and_retired) == [5, 7]
    taken = pool.take(2, registered, workers_and_retired)
    assert taken == [5, 7]
    # A restart of 3 still needs one: the third spare on its way gives it.
    assert pool.claim_coming(1, registered, workers_and_retired | set(taken)) == 1
    assert pool.claim_coming(1, registered, workers_and_retired | set(taken)) == 0
    assert pool.refill() == 3                                    # all three replaced


def test_fewer_spares_than_workers_leave_the_rest_cold():
    pool = WarmStandby(1, RecordingLauncher(), {})
    pool.refill()
    registered, taken = {0, 1, 2}, {0, 1}
    assert pool.take(2, registered, taken) == [2]
    assert pool.claim_coming(1, registered, taken | {2}) == 0     # the caller launches it


def test_a_launch_that_fails_leaves_the_next_restart_cold_and_is_tried_again():
    launcher = RecordingLauncher(fail=True)
    pool = WarmStandby(2, launcher, {})
    assert pool.refill() == 0
    assert pool.claim_coming(2, {0, 1}, {0, 1}) == 0             # nothing promised
    launcher.fail = False
    assert pool.refill() == 2


def test_stale_spares_are_ended_and_the_pool_starts_empty():
    launcher = RecordingLauncher()
    stopped = []
    launcher.stop_engines_sync = lambda set_id=None: stopped.append(set_id)
    pool = WarmStandby(2, launcher, {})
    pool.refill()
    pool.stale = True
    ended = pool.end_old(registered={0, 1, 4, 5}, taken={0, 1})
    assert ended == {4, 5} and stopped == [None] and not pool.stale
    assert pool.claim_coming(2, set(), set()) == 0
    assert pool.refill() == 2
