"""Warm standby (`%tfdist start --standby K`): spare engines, TensorFlow imported, become
the workers of the next restart, whether asked for or after a death, and the pool fills
again; a Keras switch ends the spares launched for the other Keras.

Real 2-worker cluster with 2 spares, real kernel. The spares are told apart by pid: a
restart's new workers must be the very processes that waited as spares.
"""

from __future__ import annotations

import json

import pytest
from IPython.core.error import UsageError
from tfmw_notebook import TFCluster
from tfmw_notebook.errors import BadArgument

from kernel_session import kernel_with_cluster, per_worker
from seed_code import MNIST_SETUP
from test_faults import FIT_WITH_FAULT, wait_until_gone

pytestmark = pytest.mark.timeout(420)

# In the kernel: the spares' pids once `expected` of them registered (the pool fills in
# the background after a start or restart), and the workers' pids.
HELPERS = '''
import json as _json, os as _os, time as _time
from tfmw_notebook.magics.session import active_cluster as _cluster

def _spare_pids(expected, seconds=120):
    group = _cluster()._group
    deadline = _time.monotonic() + seconds
    while True:
        spares = group.standby.spares(group.registered(), group._taken())
        if len(spares) >= expected:
            return sorted(group.client[spares].apply_sync(_os.getpid))
        if _time.monotonic() > deadline:
            raise TimeoutError(f"{len(spares)} of {expected} spares registered")
        _time.sleep(0.2)

def _spare_environment(name):
    group = _cluster()._group
    spares = group.standby.spares(group.registered(), group._taken())
    return group.client[spares].apply_sync(lambda key: __import__('os').environ.get(key), name)

def _worker_pids():
    return sorted(w.pid for w in _cluster().workers)
'''

DIGEST = '''
import hashlib
digest = hashlib.sha256(b"".join(w.tobytes() for w in model.get_weights())).hexdigest()
'''


def _printed(kernel, expression):
    return json.loads(kernel.ok(f"print(_json.dumps({expression}))").stdout.strip()
                      .splitlines()[-1])


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    with kernel_with_cluster(str(tmp_path_factory.mktemp("standby-kernel")),
                             flags="--standby 2") as session:
        session.ok(HELPERS)
        yield session


def test_the_start_says_spares_are_coming(kernel):
    assert "2 spare engines start in the background" in kernel.start_line


def test_a_restart_makes_the_spares_workers_and_the_pool_fills_again(kernel):
    spares = _printed(kernel, "_spare_pids(2)")
    old_workers = _printed(kernel, "_worker_pids()")
    kernel.ok("%%tfdist\nx = 41")
    out = kernel.ok("%tfdist restart", timeout=120)
    assert "restarted: 2 fresh workers" in out.stdout
    assert _printed(kernel, "_worker_pids()") == spares           # the spares, now workers
    assert wait_until_gone(old_workers, 10) == []
    gone = kernel.execute("%%tfdist\nx")
    assert gone.status == "error" and "NameError" in gone.error_text + gone.stderr
    # They train in step like any workers.
    kernel.ok("%%tfdist\n" + MNIST_SETUP)
    kernel.ok("%%tfdist --no-checkpoint\nmodel = build_and_compile_cnn_model()\n"
              "model.fit(mnist_dataset(64), epochs=1, steps_per_epoch=3, verbose=0)\n" + DIGEST,
              timeout=180)
    digests = per_worker(kernel, "digest")
    assert len(digests) == 2 and digests[0] == digests[1]
    refilled = _printed(kernel, "_spare_pids(2)")
    assert not set(refilled) & (set(spares) | set(old_workers))


def test_a_worker_that_dies_mid_fit_is_replaced_by_spares(kernel, tmp_path):
    spares = _printed(kernel, "_spare_pids(2)")
    kernel.ok("%%tfdist\n" + MNIST_SETUP)
    code = FIT_WITH_FAULT.format(rank=1, batch=3, marker=str(tmp_path / "killed"), epochs=1,
                                 action="os.kill(os.getpid(), signal.SIGKILL)")
    out = kernel.execute("%%tfdist --no-checkpoint\n" + code, timeout=240)
    assert out.status == "error" and "died" in out.error["evalue"], out.error_text
    assert "The workers were restarted in" in out.error["evalue"], out.error["evalue"]
    assert _printed(kernel, "_worker_pids()") == spares
    works = kernel.ok("%%tfdist\nfloat(strategy.reduce('SUM', strategy.run("
                      "lambda: tf.constant(1.0)), axis=None))")
    assert works.results[-1]["text/plain"] == "2.0"


def test_switching_keras_ends_the_spares_of_the_other_keras(kernel):
    spares = _printed(kernel, "_spare_pids(2)")
    assert _printed(kernel, "_spare_environment('TF_USE_LEGACY_KERAS')") == ["1", "1"]
    out = kernel.ok("%tfdist restart --keras 3", timeout=180)
    assert "running Keras 3" in out.stdout, out.stdout
    assert wait_until_gone(spares, 10) == []                       # launched for tf-keras
    assert not set(_printed(kernel, "_worker_pids()")) & set(spares)
    assert _printed(kernel, "_spare_pids(2)") and \
        _printed(kernel, "_spare_environment('TF_USE_LEGACY_KERAS')") == ["0", "0"]


def test_stop_ends_the_spares_with_the_workers(kernel):
    spares = _printed(kernel, "_spare_pids(2)")
    workers = _printed(kernel, "_worker_pids()")
    assert "stopped 2 workers" in kernel.ok("%tfdist stop", timeout=120).stdout
    assert wait_until_gone(spares + workers, 20) == []


@pytest.mark.unit
def test_a_negative_standby_is_refused_in_one_line_before_anything_starts(ip):
    ip.user_ns["precious"] = 42
    with pytest.raises(UsageError) as error:
        ip.run_line_magic("tfdist", "start --standby -1")
    assert "--standby" in str(error.value) and "0 or more" in str(error.value)
    assert "\n" not in str(error.value) and ip.user_ns["precious"] == 42
    with pytest.raises(BadArgument, match=r"standby=-1\. Expected a whole number of spare"):
        TFCluster.start(2, standby=-1)


@pytest.mark.unit
def test_standby_on_attach_by_connection_file_is_refused_in_one_line_before_anything(ip):
    ip.user_ns["precious"] = 42
    with pytest.raises(UsageError) as error:
        ip.run_line_magic("tfdist", "attach --url-file /nowhere.json --standby 2")
    message = str(error.value)
    assert message.startswith("--standby launches spare engines through the cluster's "
                              "launcher") and "attach with --profile" in message, message
    assert "\n" not in message and ip.user_ns["precious"] == 42
