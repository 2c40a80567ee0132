"""The correction to MLflow's dataset digest (worker/experiments/tracker_corrections.py), in a fresh
process with real TensorFlow and MLflow: an endless dataset gets a digest, a finite one
keeps MLflow's own. On 2 real workers under autolog: tests/test_tracking.py."""

import json
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.timeout(240)

DIGESTS = '''
import json
import numpy as np
import tensorflow as tf
from tfmw_notebook.worker.experiments import tracker_corrections

if {correct}:
    tracker_corrections.install()           # before MLflow is imported, as on a worker
import mlflow.data
from mlflow.data.tensorflow_dataset import TensorFlowDataset

x = np.arange(640, dtype="float32").reshape(320, 2)
finite = tf.data.Dataset.from_tensor_slices(x).batch(16)
own_digest = getattr(TensorFlowDataset._compute_tensorflow_dataset_digest, "__wrapped__",
                     TensorFlowDataset._compute_tensorflow_dataset_digest)
digests = {{"finite": mlflow.data.from_tensorflow(finite).digest,
            "finite_by_mlflow": own_digest(None, finite)}}
if {correct}:
    first = tf.data.Dataset.from_tensor_slices(x).repeat().batch(16).take(
        tracker_corrections.DIGEST_ELEMENTS)
    digests["endless"] = mlflow.data.from_tensorflow(
        tf.data.Dataset.from_tensor_slices(x).repeat().batch(16)).digest
    digests["endless_prefix_by_mlflow"] = own_digest(None, first)
    # unknown length (a filter), shorter than the bound: the digest MLflow gives it
    unknown = finite.filter(lambda batch: True)
    digests["unknown"] = mlflow.data.from_tensorflow(unknown).digest
    digests["unknown_by_mlflow"] = own_digest(None, unknown)
else:
    import time
    began = time.perf_counter()
    mlflow.data.from_tensorflow(finite)
    endless = tf.data.Dataset.from_tensor_slices(x).repeat().batch(16)
    print(f"DIGESTING {{time.perf_counter() - began:.4f}}", flush=True)
    mlflow.data.from_tensorflow(endless)
print("DIGESTS " + json.dumps(digests), flush=True)
'''


def run_digests(correct: bool, timeout: float) -> subprocess.CompletedProcess:
    pytest.importorskip("mlflow")
    return subprocess.run([sys.executable, "-c", DIGESTS.format(correct=correct)],
                          capture_output=True, text=True, timeout=timeout)


def test_an_endless_dataset_is_digested_from_its_first_elements_and_finite_ones_as_before():
    done = run_digests(correct=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    line = [text for text in done.stdout.splitlines() if text.startswith("DIGESTS ")][-1]
    digests = json.loads(line.removeprefix("DIGESTS "))
    assert digests["finite"] == digests["finite_by_mlflow"]
    assert digests["endless"] == digests["endless_prefix_by_mlflow"]
    assert digests["unknown"] == digests["unknown_by_mlflow"]
    assert digests["endless"] != digests["finite"]


def test_without_the_correction_mlflow_digests_an_endless_dataset_for_ever():
    # What the correction is for (mlflow#9600): the digest does not end. The process says
    # when it starts digesting, and how long a finite dataset's digest took it: still
    # digesting after 100 times that (at least 15 s) is "for ever".
    pytest.importorskip("mlflow")
    process = subprocess.Popen([sys.executable, "-c", DIGESTS.format(correct=False)],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        finite_seconds = _seconds_when_digesting(process, deadline=time.monotonic() + 180)
        limit = max(15.0, 100 * finite_seconds)
        with pytest.raises(subprocess.TimeoutExpired):
            process.wait(timeout=limit)
    finally:
        process.kill()
        process.wait(timeout=30)


def _seconds_when_digesting(process: subprocess.Popen, deadline: float) -> float:
    """The finite digest's seconds from the line `DIGESTING <seconds>`."""
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("DIGESTING "):
            return float(line.split()[1])
        assert time.monotonic() < deadline, "no DIGESTING line in time"
    raise AssertionError(f"the process ended (code {process.wait()}) before digesting")
