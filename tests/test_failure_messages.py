"""What the notebook says when a cell fails: one traceback naming the worker, a dead
worker's cause, and a start that replaces a cluster left without workers.

The dead-worker tests kill their own one-worker cluster's engine (a real SIGKILL, a
real os._exit(3), the kernel's OOM killer under a memory cgroup's limit); the traceback
test uses the shared cluster (nothing dies there).
"""

import json
import re

import pytest
from tfmw_notebook.cluster.cells import death_cause

from kernel_session import kernel_with_cluster
from memory_cgroup import memory_limited_or_skip

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


def test_a_tf_function_error_is_named_by_its_cause_not_its_header(tf_kernel):
    # TensorFlow's message starts "in user code:"; the cause is its last line.
    out = tf_kernel.execute("%%tfdist --no-checkpoint\n"
                            "@tf.function\ndef step(x):\n    raise ValueError('papercut six')\n"
                            "if tfdist.rank == 1:\n    step(tf.constant(1.0))\n", timeout=120)
    assert out.status == "error" and out.error["ename"] == "WorkerFailed"
    assert out.error["evalue"].startswith("worker 1 failed: ValueError: papercut six"), out.error
    assert "in user code" not in out.error["evalue"], out.error
    assert "[worker 1] raised ValueError: papercut six; its traceback:" in out.stderr


@pytest.mark.parametrize("fault, cause", [
    ("os._exit(3)", "died (exit code 3)"),
    ("os.kill(os.getpid(), signal.SIGKILL)", "died (killed by SIGKILL)"),
])
def test_a_dead_worker_is_named_with_its_cause(lone, fault, cause):
    out = lone.execute(f"%%tfdist --no-checkpoint\nimport os, signal\n{fault}", timeout=120)
    assert out.status == "error" and out.error["ename"] == "WorkerFailed"
    assert "worker 0 (pid " in out.error["evalue"] and cause in out.error["evalue"], out.error
    lone.ok("%%tfdist\nx = 1")   # restarted by itself


def test_a_worker_the_oom_killer_ends_is_named_so_with_the_memory_it_held(lone):
    out = lone.ok("import json\nfrom tfmw_notebook.magics.session import active_cluster\n"
                  "print(json.dumps([row['pid'] for row in active_cluster().status()]))")
    (pid,) = json.loads(out.stdout.strip().splitlines()[-1])
    limit = 256 << 20   # for what it allocates from now on: the 1 GiB below cannot fit
    with memory_limited_or_skip(pid, limit):
        out = lone.execute("%%tfdist --no-checkpoint\nheld = b'x' * (1 << 30)", timeout=120)
    assert out.status == "error" and out.error["ename"] == "WorkerFailed"
    message = out.error["evalue"]
    assert f"worker 0 (pid {pid}" in message, message
    said = re.search(r"was killed by the kernel's out-of-memory killer holding "
                     r"([0-9.]+) (GiB|MiB) \(SIGKILL\)", message)
    assert said and "died" not in message, message
    held = float(said.group(1)) * (1 << (30 if said.group(2) == "GiB" else 20))
    assert held >= limit, message   # at least what it allocated inside its limit
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
    (-9, "died (killed by SIGKILL)"), (-15, "died (killed by SIGTERM)"),
    (3, "died (exit code 3)"), (0, "died (exit code 0)"), (None, "died"), ("unknown", "died"),
])
def test_exit_causes(code, words):
    assert death_cause.death_words(code, oom=None) == words


def test_the_oom_killer_is_named_only_for_a_sigkill_or_an_unknown_end():
    held = death_cause.OomKill(held=int(1.25 * (1 << 30)))
    assert death_cause.death_words(-9, held) == (
        "was killed by the kernel's out-of-memory killer holding 1.2 GiB (SIGKILL)")
    assert death_cause.death_words(None, death_cause.OomKill()) == (
        "was killed by the kernel's out-of-memory killer")
    assert death_cause.death_words(3, held) == "died (exit code 3)"


def test_sizes_read_as_mib_below_a_gib():
    assert death_cause.size_words(870 * (1 << 20)) == "870 MiB"
    assert death_cause.size_words(3 << 30) == "3.0 GiB"


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


def test_the_memory_a_killed_process_held_is_read_from_the_kernels_line():
    # As this machine's kernel wrote it for a process over its cgroup's limit.
    log = ("[14818.18] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),task=python3,"
           "pid=23382,uid=0\n"
           "[14818.18] Memory cgroup out of memory: Killed process 23382 (python3) "
           "total-vm:630972kB, anon-rss:211200kB, file-rss:6640kB, shmem-rss:0kB, UID:0 "
           "pgtables:480kB oom_score_adj:0\n")
    assert death_cause.oom_held_in_log(log, 23382) == (211200 + 6640) * 1024
    assert death_cause.oom_held_in_log(log, 2338) is None
    assert death_cause.oom_held_in_log("Killed process 5 (x) total-vm:1kB\n", 5) is None


def test_oom_sources_fail_soft(monkeypatch):
    monkeypatch.setattr(death_cause, "_read", lambda path: None)
    monkeypatch.setattr(death_cause, "read_kernel_log", lambda: "")
    watch = death_cause.OomWatch()
    assert watch.before is None and watch.kill_of(1234) is None
