"""Going on with fewer workers when a host is lost (cluster/cells/shrink.py, recovery.py): the
decision and its messages, on a fake cluster (no engines)."""

import pytest
from tfmw_notebook.cluster.cells import shrink
from tfmw_notebook.cluster.cells.recovery import Recovery
from tfmw_notebook.cluster.cells.state_log import StateLog
from tfmw_notebook.errors import Failure, WorkerFailed
from tfmw_notebook.protocol.tfconfig import EngineReport

pytestmark = pytest.mark.unit


def _worker(engine_id: int, host: str) -> EngineReport:
    return EngineReport(engine_id=engine_id, host=host, address="198.18.0.1", port=1000,
                        pid=100 + engine_id)


class _Cluster:
    """What Recovery needs, recording what it was asked."""

    def __init__(self, hosts, min_workers, fail_restart=None):
        self.workers = [_worker(i, host) for i, host in enumerate(hosts)]
        self.min_workers = min_workers
        self.resized = None
        self.last_restart_seconds = 1.5
        self.last_restore = None
        self.state_log = StateLog()
        self.asked: list = []
        self.fail_restart = fail_restart

    def replace_workers(self, size=None, place=None, lost_hosts=()):
        self.asked.append(("replace", size, place, tuple(lost_hosts)))
        if self.fail_restart:
            raise self.fail_restart
        self.workers = [_worker(10 + i, host) for i, host in enumerate(
            host for host, count in (place or {}).items() for _ in range(count))]

    def stop_workers(self, lost_hosts=()):
        self.asked.append(("stop", tuple(lost_hosts)))
        self.workers = []

    def forget_state(self):
        self.asked.append(("forget",))


def _lost(host: str) -> WorkerFailed:
    return WorkerFailed(Failure(f"worker 2 (on {host}) not heard from for 6 s", kind="lost",
                                rank=2, retryable=False, lost_hosts=(host,)))


def test_a_lost_host_goes_by_its_name_and_its_workers_addresses():
    workers = [_worker(0, "a"), EngineReport(engine_id=1, host="b", address="198.18.0.2",
                                             port=1000, pid=101)]
    assert shrink.unreachable_names(workers, ["b"]) == {"b", "198.18.0.2"}
    assert shrink.unreachable_names(workers, []) == set()


def test_the_launchers_of_a_lost_host_are_not_asked_to_stop_its_engines():
    """ssh to a host that is gone waits for its timeouts (minutes by default) and fails."""
    from types import SimpleNamespace

    from ipyparallel.cluster.launcher import SSHEngineLauncher
    from tfmw_notebook.cluster.launch.engines import _forget_unreachable

    launchers = {str(i): SSHEngineLauncher(hostname=host)
                 for i, host in enumerate(["a", "198.18.0.2", "a"])}
    local = {"0": object()}   # not an SSH launcher: ended through its own process
    cluster = SimpleNamespace(engines={"ssh": SimpleNamespace(launchers=launchers),
                                       "local": SimpleNamespace(launchers=local)})
    _forget_unreachable(cluster, {"b", "198.18.0.2"})
    assert sorted(launchers) == ["0", "2"] and list(local) == ["0"]
    _forget_unreachable(cluster, set())
    assert sorted(launchers) == ["0", "2"]


def test_survivors_and_their_placement():
    workers = [_worker(0, "a"), _worker(1, "a"), _worker(2, "b"), _worker(3, "c")]
    left = shrink.survivors(workers, ["b"])
    assert [w.engine_id for w in left] == [0, 1, 3]
    assert shrink.placement(left) == {"a": 2, "c": 1}


@pytest.mark.parametrize("floor, workers, expected", [
    (None, 2, None), (1, 2, None), (2, 2, None),
    (3, 2, "--min-workers 3 is above the cluster's 2 workers: give at most 2"),
    (0, 2, "--min-workers must be a whole number of workers >= 1, got 0"),
    (True, 2, "--min-workers must be a whole number of workers >= 1, got True"),
])
def test_the_floor_is_checked(floor, workers, expected):
    found = shrink.floor_problem(floor, workers)
    assert (found is None) if expected is None else found.startswith(expected), found


def test_a_lost_host_with_enough_left_restarts_there_and_may_run_the_cell_again(capsys):
    cluster = _Cluster(["a", "a", "b", "b"], min_workers=2)
    failed = Recovery(cluster).recover(_lost("b"), replay=True)
    assert cluster.asked == [("replace", 2, {"a": 2}, ("b",)), ("forget",)]
    assert failed.recovered and failed.retryable and cluster.resized == (4, 2)
    assert "Went on with 2 of 4 workers (`min_workers=2`), restarted in 1.5 s" in str(failed)
    assert "once b can be reached, `cluster.resize(n=4)` grows it back" in str(failed)
    assert "going on with the 2 workers of the hosts left" in capsys.readouterr().err


def test_too_few_left_or_no_floor_stops_every_worker_as_before():
    for floor in (3, None):
        cluster = _Cluster(["a", "a", "b", "b"], min_workers=floor)
        failed = Recovery(cluster).recover(_lost("b"), replay=True)
        assert cluster.asked == [("stop", ("b",))] and not failed.recovered
        assert "when b can be reached again, run `cluster.restart()`" in str(failed)


def test_a_restart_on_the_hosts_left_that_fails_says_so():
    from tfmw_notebook.errors import ClusterSetupError

    cluster = _Cluster(["a", "b"], min_workers=1,
                       fail_restart=ClusterSetupError("ssh: connect to host a: refused"))
    failed = Recovery(cluster).recover(_lost("b"), replay=True)
    assert not failed.recovered
    assert str(failed).endswith("the workers could not be restarted on the hosts left: "
                                "ssh: connect to host a: refused")


def test_from_a_magic_the_lines_name_the_magic_and_its_options(capsys):
    from tfmw_notebook.errors import called_from_magic

    cluster = _Cluster(["a", "b"], min_workers=1)
    with called_from_magic():
        failed = Recovery(cluster).recover(_lost("b"), replay=True)
    assert "Went on with 1 of 2 workers (--min-workers 1)" in str(failed)
    err = capsys.readouterr().err
    assert "(--min-workers 1); once b can be reached, `%tfdist resize -n 2` grows it back" in err
