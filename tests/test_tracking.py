"""Experiment tracking on a real 2-worker cluster: MLflow's autolog in a cell gives one run
(the chief's) and no stall; `%tfdist tracking mlflow URI` logs run records to a real
`mlflow server`; W&B's `wandb.init` (a fake `wandb` on the workers' path) is disabled on
every worker but the chief.

Shares the session's kernel and cluster (tf_kernel).
"""

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from kernel_session import per_worker

pytestmark = pytest.mark.timeout(300)


def mlflow_client(uri: str):
    mlflow = pytest.importorskip("mlflow")      # here, not at collection: `-m unit` is fast
    return mlflow.MlflowClient(tracking_uri=uri)

DATA = '''
import numpy as np
_rng = np.random.RandomState(0)
_x = _rng.uniform(0, 1, (128, 8)).astype("float32")
_y = _rng.uniform(0, 1, (128, 1)).astype("float32")
tracking_data = tf.data.Dataset.from_tensor_slices((_x, _y)).batch(32)

def tracking_model(learning_rate=0.01):
    model = tf.keras.Sequential([tf.keras.layers.Input((8,)), tf.keras.layers.Dense(4),
                                 tf.keras.layers.Dense(1)])
    model.compile(optimizer=tf.keras.optimizers.SGD(learning_rate), loss="mse")
    return model
'''

AUTOLOG = '''
import mlflow
mlflow.set_tracking_uri({uri!r})
mlflow.set_experiment("autolog-on-two-workers")
mlflow.tensorflow.autolog()
model = tracking_model()
model.fit(tracking_data, epochs=2, verbose=0)
tracking_uri_here = mlflow.get_tracking_uri()
'''

ENDLESS_FIT = '''
endless = tracking_data.unbatch().shuffle(128, seed=1).repeat().batch(32)
model = tracking_model()
model.fit(endless, epochs=2, steps_per_epoch=3, verbose=0)
'''



@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    """A real `mlflow server` (sqlite store), started early: it takes seconds to come up,
    which the autolog test's cell covers."""
    pytest.importorskip("mlflow")
    server, url = start_mlflow_server(tmp_path_factory.mktemp("mlflow-server"))
    try:
        yield server, url
    finally:
        stop(server)


@pytest.fixture
def autolog_kernel(tmp_path):
    """A kernel and cluster of its own: autolog stays on in the workers it ran in (MLflow
    keeps it for every later fit), which the session's shared workers must not get."""
    from kernel_session import kernel_with_cluster

    with kernel_with_cluster(str(tmp_path)) as session:
        yield session


def test_autolog_on_two_workers_gives_one_run_holding_the_epochs_and_no_stall(
        autolog_kernel, tmp_path, mlflow_server):  # the server starts meanwhile, for a later test
    tf_kernel = autolog_kernel
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    started = time.monotonic()
    # Before the fix both workers logged: two runs, or a stalled collective (the job hung
    # until the collective timed out). The cell's own deadline stops a stall early.
    tf_kernel.ok("%%tfdist --timeout 150\n" + DATA + AUTOLOG.format(uri=uri), timeout=200)
    took = time.monotonic() - started

    client = mlflow_client(uri)
    experiment = client.get_experiment_by_name("autolog-on-two-workers")
    runs = client.search_runs([experiment.experiment_id])
    assert len(runs) == 1, [run.info.run_name for run in runs]
    history = client.get_metric_history(runs[0].info.run_id, "loss")
    assert sorted(metric.step for metric in history) == [0, 1]
    assert runs[0].info.status == "FINISHED"
    # The other worker ran the same autolog (and so the same collectives: the model's
    # signature and save), into a throwaway store of its own.
    chief_uri, other_uri = per_worker(tf_kernel, "tracking_uri_here")
    assert chief_uri == uri
    assert other_uri.startswith("file://") and "tfmw-throwaway-mlruns" in other_uri
    print(f"autolog cell on 2 workers: {took:.1f} s")

    # Autolog stays on: the next fit, on an endless dataset as TensorFlow's tutorial trains,
    # is logged too. Before the correction MLflow's dataset digest iterated it for ever
    # (mlflow#9600) and the cell ran into its deadline.
    started = time.monotonic()
    tf_kernel.ok("%%tfdist --timeout 150\n" + ENDLESS_FIT, timeout=200)
    print(f"autolog fit on an endless dataset: {time.monotonic() - started:.1f} s")
    runs = client.search_runs([experiment.experiment_id], order_by=["attributes.start_time"])
    assert len(runs) == 2, [run.info.run_name for run in runs]
    endless = runs[1]
    assert endless.info.status == "FINISHED"
    assert sorted(m.step for m in client.get_metric_history(endless.info.run_id, "loss")) == [0, 1]
    logged = [entry.dataset for entry in endless.inputs.dataset_inputs]
    assert len(logged) == 1 and logged[0].digest, logged


FAKE_WANDB = '''
"""A stand-in for W&B: records each call, as the real one would receive it."""
import os
calls = []

def init(*args, **kwargs):
    calls.append(("init", kwargs.get("mode"), os.environ.get("WANDB_MODE")))
    return "run"

def login(*args, **kwargs):
    calls.append(("login",))
    return True
'''


def test_wandb_init_is_disabled_on_every_worker_but_the_chief(tf_kernel, tmp_path):
    package = tmp_path / "fake_wandb_path"
    package.mkdir()
    (package / "wandb.py").write_text(FAKE_WANDB)
    tf_kernel.ok(f"%%tfdist\nimport sys\nsys.path.insert(0, {str(package)!r})\nimport wandb\n"
                 "wandb.login(key='k')\nwandb.init(project='p', mode='online')\n"
                 "wandb_calls = list(wandb.calls)\nsys.path.remove(sys.path[0])")
    chief, other = per_worker(tf_kernel, "wandb_calls")
    assert chief == [["login"], ["init", "online", None]]
    assert other == [["init", "disabled", "disabled"]]   # no login either


# -- %tfdist tracking mlflow URI, with a real tracking server ---------------------------------

FIT = ("%%tfdist --name {name}\nmodel = tracking_model({lr})\n"
       "model.fit(tracking_data, epochs=2, verbose=0)")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_mlflow_server(directory) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false")  # no job workers
    server = subprocess.Popen(
        [os.path.join(os.path.dirname(sys.executable), "mlflow"), "server",
         "--backend-store-uri", f"sqlite:///{directory / 'server.db'}",
         "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
        cwd=directory, env=env, stdout=open(directory / "server.log", "w"),
        stderr=subprocess.STDOUT, start_new_session=True)
    return server, f"http://127.0.0.1:{port}"


def wait_until_up(server: subprocess.Popen, url: str, deadline_s: float) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        assert server.poll() is None, "the mlflow server exited"
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            time.sleep(0.25)
    raise TimeoutError(f"mlflow server not up at {url} within {deadline_s} s")


def stop(server: subprocess.Popen) -> None:
    """End the server and the processes it started (its own session), with a deadline."""
    try:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(timeout=15)
    except ProcessLookupError:
        pass


def test_tracking_magic_logs_two_fits_records_to_a_real_mlflow_server(tf_kernel, mlflow_server):
    started = time.monotonic()
    server, url = mlflow_server
    try:
        tf_kernel.ok("%%tfdist\n" + DATA, timeout=200)
        wait_until_up(server, url, deadline_s=90)
        out = tf_kernel.ok(f"%tfdist tracking mlflow {url} --experiment two-fits")
        assert f"tracking to mlflow at {url}" in out.stdout
        # Two cells, no tracking code in them: each fit's run record goes to the server.
        for name, lr in (("trk-a", 0.01), ("trk-b", 0.05)):
            tf_kernel.ok(FIT.format(name=name, lr=lr), timeout=200)
        check_the_runs(url)
        check_a_failed_record(url)
        # The server goes away mid-session: the next run costs one warning line, not the cell.
        stop(server)
        out = tf_kernel.ok(FIT.format(name="trk-c", lr=0.01), timeout=200)
        warning = [line for line in out.stderr.splitlines() if line.startswith("tfdist:")]
        assert len(warning) == 1 and "was not logged to MLflow" in warning[0], out.stderr
        assert "its record stays on disk" in warning[0]
        assert os.path.exists(os.path.join(tf_kernel.cwd, "tfdist_checkpoints", "trk-c",
                                           "run.json"))
    finally:
        stop(server)
        tf_kernel.ok("%tfdist tracking off")
    print(f"two runs to a real mlflow server: {time.monotonic() - started:.1f} s")


def check_the_runs(url: str) -> None:
    client = mlflow_client(url)
    experiment = client.get_experiment_by_name("two-fits")
    runs = {run.info.run_name: run for run in client.search_runs([experiment.experiment_id])}
    assert sorted(runs) == ["trk-a", "trk-b"]
    for name, learning_rate in (("trk-a", 0.01), ("trk-b", 0.05)):
        run = runs[name]
        params = run.data.params
        assert float(params["learning_rate"]) == pytest.approx(learning_rate), params
        assert params["epochs"] == "2" and params["optimizer"] == "SGD", params
        assert run.data.tags["tfdist.outcome"] == "completed"
        assert run.data.tags["tfdist.workers"] == "2"
        assert run.info.status == "FINISHED"
        losses = client.get_metric_history(run.info.run_id, "loss")
        assert sorted(metric.step for metric in losses) == [0, 1]
        assert all(metric.value > 0 for metric in losses)
        artifacts = [item.path for item in client.list_artifacts(run.info.run_id)]
        assert "cell.py" in artifacts and "checkpoint" in artifacts
    assert (runs["trk-a"].data.metrics["loss"] != runs["trk-b"].data.metrics["loss"])


def check_a_failed_record(url: str) -> None:
    """A fit that failed: its run says so (status and error), with the epochs it did."""
    from tfmw_notebook.cluster.runs import tracking

    run_id = tracking.log_run({"name": "run-3", "outcome": "failed", "epochs": [1],
                               "history": {"loss": [0.5]}, "error": "ValueError: bad shape",
                               "cluster": {"workers": 2}}, url, "two-fits")
    run = mlflow_client(url).get_run(run_id)
    assert run.info.status == "FAILED" and run.info.run_name == "run-3"
    assert run.data.tags["tfdist.error"] == "ValueError: bad shape"
    assert run.data.metrics == {"loss": 0.5}


def test_an_unreachable_uri_is_a_one_line_usage_error_and_keeps_the_settings(terminal_shell,
                                                                            monkeypatch):
    from IPython.core.error import UsageError
    from tfmw_notebook.cluster.runs.tracking import TrackingSettings
    from tfmw_notebook.magics.session import NotebookSession

    pytest.importorskip("mlflow")
    session = NotebookSession()
    session.tracking = TrackingSettings("mlflow", "sqlite:///kept.db")
    monkeypatch.setattr(terminal_shell.magics_manager.registry["TFDistMagics"], "session",
                        session)
    url = f"http://127.0.0.1:{free_port()}"          # nothing listens there
    started = time.monotonic()
    with pytest.raises(UsageError) as error:
        terminal_shell.run_line_magic("tfdist", f"tracking mlflow {url}")
    assert time.monotonic() - started < 30            # no minutes of retries
    text = str(error.value)
    assert text.startswith(f"cannot reach an MLflow tracking store at {url} (") and "\n" not in text
    assert "start the server or fix the URI" in text
    assert session.tracking == TrackingSettings("mlflow", "sqlite:///kept.db")
