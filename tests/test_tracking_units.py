"""Pure tests of tracking: how a run record becomes MLflow params, metrics and tags
(cluster/runs/tracking.py, no MLflow imported), and what a non-chief worker does to W&B when a
cell imports it (worker/experiments/chief_tracking.py, on a fake `wandb`, in a fresh process). The
real MLflow paths run on 2 workers and a real server in tests/test_tracking.py."""

import io
import json
import os
import subprocess
import sys

import pytest
from tfmw_notebook.cluster.runs import tracking
from tfmw_notebook.errors import BadArgument
from tfmw_notebook.protocol import checkpoints

pytestmark = pytest.mark.unit

RECORD = {
    "name": "run-3", "source": "model.fit(x)",
    "hyperparameters": {"epochs": 3, "batch_size": 64, "loss": "mse",
                        "optimizer": {"class": "Adam", "learning_rate": 0.001},
                        "callbacks[0]": None},
    "sweep": {"lr": 0.1, "batch_size": 32},
    "history": {"loss": [1.5, 0.75, float("nan")], "val loss": [2.0, 1.0, 0.5]},
    "epochs": [1, 2, 3], "wall_time": 4.5, "samples_per_second": 120.0,
    "cluster": {"workers": 2, "hosts": ["alpha", "beta"], "devices": ["CPU", "CPU"],
                "keras": "Keras 3.15.1"},
    "checkpoint_dir": "/nowhere", "outcome": "failed", "error": "ValueError: bad shape",
}


def test_params_are_the_hyperparameters_flattened_and_the_sweep_values_win():
    loaded = "mlflow" in sys.modules
    assert tracking.run_params(RECORD) == {
        "epochs": "3", "batch_size": "32", "loss": "mse", "optimizer.class": "Adam",
        "optimizer.learning_rate": "0.001", "callbacks_0_": "null", "lr": "0.1"}
    assert ("mlflow" in sys.modules) == loaded        # made without importing MLflow
    long = tracking.run_params({"hyperparameters": {"summary": "x" * 7000}})["summary"]
    assert len(long) == 6000                          # MLflow's limit


def test_metrics_are_per_epoch_with_the_epoch_as_step_nan_kept():
    metrics = tracking.run_metrics(RECORD, timestamp_ms=7)
    by_name = {}
    for key, value, stamp, step in metrics:
        assert stamp == 7
        by_name.setdefault(key, []).append((step, value))
    assert by_name["val loss"] == [(1, 2.0), (2, 1.0), (3, 0.5)]
    assert by_name["loss"][:2] == [(1, 1.5), (2, 0.75)]
    assert by_name["loss"][2][0] == 3 and by_name["loss"][2][1] != by_name["loss"][2][1]
    assert by_name["wall_time_s"] == [(3, 4.5)]
    assert by_name["samples_per_second"] == [(3, 120.0)]


def test_a_nan_kept_as_text_in_the_record_is_a_nan_metric():
    # run.json holds a diverged loss as "nan" (JSON has no NaN): MLflow still gets the epoch
    metrics = tracking.run_metrics({"history": {"loss": [0.5, "nan", "inf"]}}, 0)
    values = [value for _, value, _, _ in metrics]
    assert [step for _, _, _, step in metrics] == [0, 1, 2]
    assert values[0] == 0.5 and values[1] != values[1] and values[2] == float("inf")


def test_metrics_without_epochs_count_from_zero_and_skip_what_is_not_a_number():
    record = {"history": {"acc": [0.5, None, "x", True, 0.9]}}
    assert tracking.run_metrics(record, 0) == [("acc", 0.5, 0, 0), ("acc", 0.9, 0, 4)]


def test_tags_say_how_it_ended_and_on_what_cluster():
    tags = tracking.run_tags(RECORD)
    assert tags == {
        "tfdist.outcome": "failed", "tfdist.workers": "2", "tfdist.hosts": "alpha, beta",
        "tfdist.devices": "CPU, CPU", "tfdist.keras": "Keras 3.15.1",
        "tfdist.checkpoint_dir": "/nowhere",
        "tfdist.sweep": json.dumps({"batch_size": 32, "lr": 0.1}),
        "tfdist.error": "ValueError: bad shape"}
    assert tracking.run_tags({"outcome": "completed", "error": None}) == {
        "tfdist.outcome": "completed"}


def test_newest_checkpoint_of_a_run_directory(tmp_path):
    run = tmp_path / "run-1"
    for epoch in (1, 3, 2):
        temp = checkpoints.prepare_temp(run, epoch, nonce=str(epoch))
        checkpoints.write_meta(temp, {"epoch": epoch})
        checkpoints.commit(temp, run, epoch)
    newest = tracking.newest_checkpoint(str(run))
    assert newest is not None and newest.name == "ckpt-000003"
    assert tracking.newest_checkpoint(newest.path).name == "ckpt-000003"   # itself
    assert tracking.newest_checkpoint(str(tmp_path / "none")) is None
    assert tracking.newest_checkpoint(None) is None


def test_settings_off_and_bad_backend_need_no_mlflow():
    assert tracking.configure("off") == tracking.TrackingSettings()
    assert tracking.TrackingSettings().describe() == "tracking off"
    with pytest.raises(BadArgument, match="Received: backend='nosuch'. Expected one of mlflow"):
        tracking.configure("nosuch")
    out = io.StringIO()
    assert tracking.after_record(tracking.TrackingSettings(), RECORD, out=out) is None
    assert tracking.after_record(None, RECORD, out=out) is None
    assert out.getvalue() == ""


def test_default_uri_is_mlflows_default_database_beside_the_notebook(tmp_path):
    assert tracking.default_uri(str(tmp_path)) == f"sqlite:///{tmp_path}/mlflow.db"


def test_a_record_that_is_not_a_dict_is_refused():
    with pytest.raises(BadArgument, match="Expected a run record"):
        tracking.log_run(["not", "a", "record"], "sqlite:///x.db")


FAKE_WANDB = '''
import os
calls = []
def init(*args, **kwargs):
    calls.append(["init", kwargs.get("mode"), os.environ.get("WANDB_MODE")])
def login(*args, **kwargs):
    calls.append(["login"])
'''

WORKER = '''
import json, os, sys
from tfmw_notebook.worker.experiments import chief_tracking
chief_tracking.install(is_chief=sys.argv[1] == "chief")
try:
    import wandb                      # not on the path yet: the action must wait for it
except ImportError:
    pass
sys.path.insert(0, sys.argv[2])
import wandb
wandb.login(key="k")
wandb.init(project="p", mode="online")
print(json.dumps({"calls": wandb.calls, "mlflow": os.environ.get("MLFLOW_TRACKING_URI"),
                  "telemetry": os.environ.get("MLFLOW_DISABLE_TELEMETRY"),
                  "imported": sorted(m for m in ("mlflow", "tensorflow") if m in sys.modules)}))
'''


@pytest.mark.parametrize("role", ["chief", "other"])
def test_wandb_is_disabled_on_a_non_chief_even_when_installed_after_a_failed_import(tmp_path,
                                                                                   role):
    (tmp_path / "wandb.py").write_text(FAKE_WANDB)
    env = dict(os.environ, TMPDIR=str(tmp_path))
    for name in ("WANDB_MODE", "MLFLOW_TRACKING_URI", "MLFLOW_DISABLE_TELEMETRY"):
        env.pop(name, None)
    out = subprocess.run([sys.executable, "-c", WORKER, role, str(tmp_path)], env=env,
                         capture_output=True, text=True, timeout=60, check=True)
    seen = json.loads(out.stdout)
    assert seen["imported"] == []        # neither MLflow nor TensorFlow came along
    if role == "chief":
        assert seen == {"calls": [["login"], ["init", "online", None]], "mlflow": None,
                        "telemetry": None, "imported": []}
    else:
        assert seen["calls"] == [["init", "disabled", "disabled"]]
        assert seen["mlflow"] == f"file://{tmp_path}/tfmw-throwaway-mlruns"
        assert seen["telemetry"] == "true"
