"""The seed tutorials' code through the real magics, on a real 2-worker cluster."""


import pytest

from kernel_session import per_worker
from seed_code import CUSTOM_LOOP, MAIN, MNIST_SETUP

pytestmark = pytest.mark.timeout(300)



def test_trivial_cell_and_last_value(tf_kernel):
    out = tf_kernel.ok("%%tfdist\nx = 20\nx + tfdist.world_size")
    assert out.results and out.results[-1]["text/plain"] == "22"
    assert per_worker(tf_kernel, "x") == [20, 20]


def test_output_streams_with_worker_prefix_chief_stdout_by_default(tf_kernel):
    out = tf_kernel.ok("%%tfdist\nimport sys\nprint('hello from', tfdist.rank)\n"
                       "print('note from', tfdist.rank, file=sys.stderr)")
    assert out.stdout == "[worker 0] hello from 0\n"
    assert sorted(out.stderr.splitlines()) == ["[worker 0] note from 0", "[worker 1] note from 1"]
    out = tf_kernel.ok("%%tfdist --all-output\nprint('hello from', tfdist.rank)")
    assert sorted(out.stdout.splitlines()) == ["[worker 0] hello from 0", "[worker 1] hello from 1"]


def test_the_last_lines_arrive_when_a_workers_io_thread_is_held_past_the_flush_timeout(
        tf_kernel):
    # A busy machine, in small: each worker's I/O thread is held for 3 s while the
    # engine's own wait for its flush gives up after 0.2 s (10 s normally).
    out = tf_kernel.ok(
        "%%tfdist --all-output\nimport sys, time\n"
        "saved = sys.stdout.flush_timeout, sys.stderr.flush_timeout\n"
        "sys.stdout.flush_timeout = sys.stderr.flush_timeout = 0.2\n"
        "sys.stdout.pub_thread.io_loop.add_callback(time.sleep, 3)\n"
        "print('last line from', tfdist.rank)")
    tf_kernel.ok("%%tfdist\nsys.stdout.flush_timeout, sys.stderr.flush_timeout = saved")
    assert sorted(out.stdout.splitlines()) == ["[worker 0] last line from 0",
                                               "[worker 1] last line from 1"], out.stderr


def test_context_and_tf_config(tf_kernel):
    tf_kernel.ok("%%tfdist\nimport os, json\ncfg = json.loads(os.environ['TF_CONFIG'])\n"
                 "me = [tfdist.rank, tfdist.world_size, tfdist.is_chief, cfg['task']['index'],"
                 " len(cfg['cluster']['worker']), os.environ['TF_USE_LEGACY_KERAS'],"
                 " strategy.cluster_resolver.task_id, tf.keras.__name__.split('.')[0],"
                 " os.environ['TF_GRPC_DEFAULT_OPTIONS']]")
    fast_reconnect = "grpc.initial_reconnect_backoff_ms=50"  # set before the strategy
    assert per_worker(tf_kernel, "me") == [
        [0, 2, True, 0, 2, "1", 0, "tf_keras", fast_reconnect],   # tf-keras, the default
        [1, 2, False, 1, 2, "1", 1, "tf_keras", fast_reconnect],
    ]


def test_engines_start_without_the_kernel_debugger_yet_cells_can_import_debugpy(tf_kernel):
    # The engines skip ipykernel's debugger (debugpy's import slowed every start-up);
    # a cell's own `import debugpy` still works.
    tf_kernel.ok("%%tfdist\nimport ipykernel.debugger as _kd\nimport debugpy\n"
                 "debugger_state = [_kd._is_debugpy_available, debugpy.__name__]")
    assert per_worker(tf_kernel, "debugger_state") == [[False, "debugpy"], [False, "debugpy"]]


def test_start_up_objects_are_frozen_yet_a_cells_garbage_is_collected(tf_kernel):
    # Full collections skip the libraries' objects (worker/boot/collector.py); what cells
    # make is still the collector's: a reference cycle dropped by a cell is freed.
    tf_kernel.ok("%%tfdist\nimport gc, weakref\n"
                 "class _Node: pass\n"
                 "_a, _b = _Node(), _Node(); _a.other, _b.other = _b, _a\n"
                 "_alive = weakref.ref(_a); del _a, _b\n"
                 "gc.collect()\n"
                 "collected = [gc.get_freeze_count() > 100_000, _alive() is None, gc.isenabled()]")
    assert per_worker(tf_kernel, "collected") == [[True, True, True], [True, True, True]]


def test_cell_that_builds_its_own_strategy(tf_kernel):
    tf_kernel.ok("%%tfdist\nimport tensorflow as tf\n"
                 "own = tf.distribute.MultiWorkerMirroredStrategy()\n"
                 "own_exp = tf.distribute.experimental.MultiWorkerMirroredStrategy()\n"
                 "with own.scope():\n"
                 "    v = tf.Variable(1.0)\n"
                 "same = [own is strategy, own_exp is strategy, own.num_replicas_in_sync]")
    assert per_worker(tf_kernel, "same") == [[True, True, 2], [True, True, 2]]


def test_tutorial_fit_identical_losses_that_decrease(tf_kernel):
    tf_kernel.ok("%%tfdist\n" + MNIST_SETUP)
    out = tf_kernel.ok("%%tfdist\n" + MAIN, timeout=240)
    assert out.stdout.startswith("3 epochs · ")  # the dashboard's summary, no progress bars
    losses = per_worker(tf_kernel, "losses")
    assert len(losses[0]) == 3
    assert losses[0] == losses[1]
    assert losses[0][-1] < losses[0][0]


def test_custom_loop_with_strategy_run(tf_kernel):
    tf_kernel.ok("%%tfdist\n" + MNIST_SETUP)
    tf_kernel.ok("%%tfdist\n" + MAIN.replace("epochs=3", "epochs=1"), timeout=240)
    tf_kernel.ok("%%tfdist\n" + CUSTOM_LOOP, timeout=240)
    losses = per_worker(tf_kernel, "ctl_losses")
    assert len(losses[0]) == 3
    assert losses[0] == losses[1]
    assert losses[0][-1] < losses[0][0]


def test_push_and_out_round_trip(tf_kernel):
    tf_kernel.ok("scale = 3")
    tf_kernel.ok("%%tfdist --push scale --out scaled\nscaled = [scale * (tfdist.rank + 1)]")
    out = tf_kernel.ok("print(scaled)")
    assert out.stdout.strip() == "[3]"  # the chief's value


def test_status_lists_every_worker(tf_kernel):
    out = tf_kernel.ok("%tfdist status")
    lines = out.stdout.strip().splitlines()
    assert lines[0].split()[:2] == ["rank", "host"]
    assert [line.split()[0] for line in lines[1:]] == ["0", "1"]
    assert all(" yes " in line for line in lines[1:])


def test_ipython_syntax_runs_on_every_worker(tf_kernel):
    """Shell lines and magics run through each worker's IPython, as with %px."""
    out = tf_kernel.ok("%%tfdist --all-output\n!echo shell-on-$((40 + 2))\n"
                       "%time shell_y = 20 + 1\nshell_y * 2")
    assert out.stdout.count("shell-on-42") == 2, out.stdout   # every worker ran it
    assert out.results[-1]["text/plain"] == "42"
    assert "Wall time" in out.stdout + out.stderr             # %time's own report
    assert per_worker(tf_kernel, "shell_y") == [21, 21]


def test_a_magic_the_workers_lack_is_refused_before_anything_runs(tf_kernel):
    tf_kernel.ok("%%tfdist\nmagic_marker = 'before'")
    out = tf_kernel.execute("%%tfdist\nmagic_marker = 'after'\n%tfdist status")
    assert out.status == "error" and out.error is None, out.error_text   # one line, no traceback
    lines = [line for line in out.stderr.splitlines() if line.startswith("UsageError: ")]
    assert len(lines) == 1, out.stderr
    assert "`%tfdist` is a magic of this notebook, not of the workers" in lines[0]
    assert "nothing was sent to the workers" in lines[0]
    assert tf_kernel.ok("%%tfdist\nmagic_marker").results[-1]["text/plain"] == "'before'"


def test_the_notebook_waits_without_spinning_while_one_rank_is_still_running(tf_kernel):
    """Rank 0 returns at once, rank 1 works 2 s: the watch looks again every POLL_SECONDS
    (it once spun on the finished rank's future, a core the last rank needed)."""
    out = tf_kernel.ok(
        "import time\n"
        "from tfmw_notebook.cluster.cells import cell_watch\n"
        "from tfmw_notebook.cluster.launch.limits import POLL_SECONDS\n"
        "from tfmw_notebook.magics.session import active_cluster\n"
        "_looks = []\n"
        "_take_in = cell_watch.CellWatch._take_in\n"
        "cell_watch.CellWatch._take_in = lambda self, f: (_looks.append(1), _take_in(self, f))\n"
        "try:\n"
        "    _began = time.perf_counter()\n"
        "    active_cluster().run('import time\\nif tfdist.rank == 1: time.sleep(2)')\n"
        "    _seconds = time.perf_counter() - _began\n"
        "finally:\n"
        "    cell_watch.CellWatch._take_in = _take_in\n"
        "print(len(_looks), _seconds, POLL_SECONDS)")
    looks, seconds, poll = (float(v) for v in out.stdout.split())
    assert seconds >= 2.0
    assert looks <= seconds / poll + 10, (looks, seconds)
