"""The correction to MLflow's dataset digest (worker/tracker_corrections.py), in a fresh
process with real TensorFlow and MLflow: an endless dataset gets a digest, a finite one
keeps MLflow's own. On 2 real workers under autolog: tests/test_tracking.py."""

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.timeout(240)

DIGESTS = '''
import json
import numpy as np
import tensorflow as tf
from tfmw_notebook.worker import tracker_corrections

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
    endless = tf.data.Dataset.from_tensor_slices(x).repeat().batch(16)
    print("DIGESTING", flush=True)
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
    # What the correction is for (mlflow#9600): the digest does not end. 60 s is many
    # times what the corrected digest takes in the other test.
    with pytest.raises(subprocess.TimeoutExpired) as stopped:
        run_digests(correct=False, timeout=60)
    printed = stopped.value.stdout or b""     # bytes so far, whatever the text mode
    assert "DIGESTING" in (printed.decode() if isinstance(printed, bytes) else printed)
