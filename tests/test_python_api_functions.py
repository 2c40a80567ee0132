"""The Python API from a script: `cluster.run(fn, *args, **kwargs)`, `cluster.history()`,
and examples/train_script.py run as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from tfmw_notebook import TFCluster
from tfmw_notebook.errors import BadArgument, TFDistError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "train_script.py")


@pytest.mark.unit
def test_arguments_for_code_are_refused_in_one_line():
    cluster = TFCluster(group=None)  # type: ignore[arg-type]  (no engines: refused first)
    with pytest.raises(BadArgument, match=r"arguments are for a function: cluster.run\(fn"):
        cluster.run("x = 1", 1, 2)


@pytest.mark.unit
def test_history_before_any_training_says_what_to_do():
    with pytest.raises(TFDistError, match="no training has been recorded yet"):
        TFCluster(group=None).history()  # type: ignore[arg-type]


def run_in_kernel(kernel, code: str, timeout: float = 120) -> str:
    out = kernel.ok("from tfmw_notebook import active_cluster\ncluster = active_cluster()\n"
                    + code, timeout=timeout)
    return out.stdout.strip().splitlines()[-1]


def test_a_function_runs_on_every_worker_in_the_strategy_scope(tf_kernel):
    last = run_in_kernel(tf_kernel, (
        "def where(offset, scale=1):\n"
        "    global ran_at\n"
        "    ran_at = tfdist.rank * scale + offset\n"
        "    return [ran_at, tf.distribute.has_strategy(), strategy.num_replicas_in_sync]\n"
        "print(cluster.run(where, 10, scale=100), cluster.pull(['ran_at'], rank=1)['ran_at'])"))
    assert last == "[10, True, 2] 110"


def test_a_raising_rank_names_its_worker_and_the_workers_are_kept(tf_kernel):
    last = run_in_kernel(tf_kernel, (
        "from tfmw_notebook import WorkerFailed\n"
        "def fails_on_one():\n"
        "    if tfdist.rank == 1:\n"
        "        raise ValueError('rank one refuses')\n"
        "    return 'chief'\n"
        "try:\n"
        "    cluster.run(fails_on_one)\n"
        "except WorkerFailed as failure:\n"
        "    print(failure.rank, failure.error_name, failure.kept, '|', str(failure))"))
    rank, name, kept, message = last.split(" ", 3)
    assert (rank, name, kept) == ("1", "ValueError", "True")
    assert "worker 1" in message and "rank one refuses" in message


def test_a_return_value_that_cannot_travel_is_refused_in_one_line(tf_kernel):
    out = tf_kernel.ok(
        "from tfmw_notebook import active_cluster\n"
        "def returns_a_lock():\n"
        "    import threading\n"
        "    return threading.Lock()\n"
        "try:\n"
        "    active_cluster().run(returns_a_lock)\n"
        "except ValueError as exc:\n"
        "    print(type(exc).__name__, '|', exc)\n"
        "print(active_cluster().run(lambda: 'still there'))", timeout=120)
    refusal, after = out.stdout.strip().splitlines()[-2:]
    assert refusal.startswith("BadArgument | what returns_a_lock() returned on the chief "
                              "cannot be sent"), refusal
    assert after == "still there"


def test_the_example_script_trains_and_prints_the_chiefs_history(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
    done = subprocess.run([sys.executable, EXAMPLE], capture_output=True, text=True,
                          timeout=150, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("2 workers ready")
    history = json.loads(lines[1].removeprefix("chief's history: "))
    assert len(history["loss"]) == 3 and history["loss"][-1] < history["loss"][0]
    assert lines[2].startswith("workers: [0, 1] summary: {'loss': ")
    # The reported final loss is the workers' mean of the last epoch's: the chief's own.
    reported = float(lines[2].split("'loss': ")[1].rstrip("}"))
    assert abs(reported - history["loss"][-1]) < 1e-3
