"""What the notebook says when a cell fails: one traceback naming the worker, a dead
worker's cause, and a start that replaces a cluster left without workers.

The dead-worker tests kill their own one-worker cluster's engine (a real SIGKILL, a
real os._exit(3)); the traceback test uses the shared cluster (nothing dies there).
"""

import re

import pytest
from tfmw_notebook.cluster import death_cause

from kernel_session import kernel_with_cluster

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def lone(tmp_path_factory):
    with kernel_with_cluster(str(tmp_path_factory.mktemp("death-kernel")), workers=1) as session:
        yield session


def test_a_worker_traceback_is_shown_once_naming_the_worker(tf_kernel):
    out = tf_kernel.execute("%%tfdist --no-checkpoint\n"
                            "def deep():\n    raise ValueError('papercut five')\n"
                            "if tfdist.rank == 1:\n    deep()\n", timeout=120)
    assert out.status == "error" and out.error["ename"] == "WorkerFailed"
    shown = re.sub(r"\x1b\[[0-9;]*m", "", out.stderr + "\n" + "\n".join(out.error["traceback"]))
    assert shown.count("Traceback (most recent call last)") == 1, shown
    assert shown.count("----> 2     raise ValueError('papercut five')") == 1, shown
    assert "[worker 1] raised ValueError: papercut five; its traceback:" in out.stderr
    assert out.error["traceback"][0].startswith("WorkerFailed: worker 1 failed: ValueError")


@pytest.mark.parametrize("fault, cause", [
    ("os._exit(3)", "died (exit code 3)"),
    ("os.kill(os.getpid(), signal.SIGKILL)", "died (killed by SIGKILL)"),
])
def test_a_dead_worker_is_named_with_its_cause(lone, fault, cause):
    out = lone.execute(f"%%tfdist --no-checkpoint\nimport os, signal\n{fault}", timeout=120)
    assert out.status == "error" and out.error["ename"] == "WorkerFailed"
    assert "worker 0 (pid " in out.error["evalue"] and cause in out.error["evalue"], out.error
    lone.ok("%%tfdist\nx = 1")   # restarted by itself


def test_start_replaces_a_cluster_left_without_workers(lone):
    lone.ok("from tfmw_notebook.magics.session import active_cluster\n"
            "active_cluster().stop_workers()")   # what a failed restart leaves
    refused = lone.execute("%%tfdist\nx = 1")
    assert "`%tfdist restart` or `%tfdist start`" in refused.error_text + refused.stderr
    out = lone.ok("%tfdist start -n 1", timeout=180)
    assert out.stdout.startswith("the cluster had no workers left (a restart failed?): "
                                 "starting 1 new ones in its place\n1 workers ready"), out.stdout
    lone.ok("%%tfdist\nx = 1")
    again = lone.execute("%tfdist start -n 1")
    assert "a cluster of 1 workers is already running" in again.stderr + again.error_text


# -- the pure parts -------------------------------------------------------------------


@pytest.mark.parametrize("code, words", [
    (-9, " (killed by SIGKILL)"), (-15, " (killed by SIGTERM)"), (3, " (exit code 3)"),
    (0, " (exit code 0)"), (None, ""), ("unknown", ""),
])
def test_exit_causes(code, words):
    assert death_cause.cause(code, oom=False) == words


def test_the_oom_killer_is_named_only_for_a_sigkill_or_an_unknown_end():
    assert death_cause.cause(-9, oom=True) == " (killed by the out-of-memory killer: SIGKILL)"
    assert death_cause.cause(None, oom=True) == " (killed by the out-of-memory killer)"
    assert death_cause.cause(3, oom=True) == " (exit code 3)"


def test_oom_counters_and_kernel_log_are_parsed():
    v2 = "low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\noom_group_kill 0\n"
    v1 = "oom_kill_disable 0\nunder_oom 0\noom_kill 5\n"
    assert death_cause.oom_kill_count(v2) == 2 and death_cause.oom_kill_count(v1) == 5
    assert death_cause.oom_kill_count("") is None
    log = ("[ 12.3] Memory cgroup out of memory: Killed process 4242 (python) total-vm:1kB\n"
           "[ 12.4] oom-kill:constraint=CONSTRAINT_MEMCG,task=python,pid=777,uid=0\n")
    assert death_cause.oom_killed_in_log(log, 4242) and death_cause.oom_killed_in_log(log, 777)
    assert not death_cause.oom_killed_in_log(log, 424)
    assert not death_cause.oom_killed_in_log(log, 77)


def test_oom_sources_fail_soft(monkeypatch):
    monkeypatch.setattr(death_cause, "_read", lambda path: None)
    monkeypatch.setattr(death_cause, "read_kernel_log", lambda: "")
    watch = death_cause.OomWatch()
    assert watch.before is None and watch.killed(1234) is False
