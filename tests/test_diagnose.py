"""`%tfdist diagnose`: where a step's time goes, measured on a real 2-worker cluster.

A tiny model with a small batch spends its step in the all-reduce; a wide model
with a large batch in computing, and the model must come out untouched. Whether the parts,
each timed on its own, add up to the step is a timing judgement that a loaded machine breaks
(their sum fell to 0.55x of the step beside a CPU-bound process): it is measured by
benchmarks/diagnose_parts.py, not judged here.
"""

import base64
import re

import pytest
from tfmw_notebook.cluster.diagnosis import Diagnosis, WorkerTimings

from kernel_session import kernel_with_cluster

# Its checks are timings (the parts must add up to the step): another module's load beside it
# has broken them, so it runs alone.
pytestmark = [pytest.mark.timeout(420), pytest.mark.alone]

SETUP = '''
import hashlib
import numpy as np

def job(width, batch):
    rng = np.random.RandomState(0)
    x = rng.uniform(0, 1, (4096, 32)).astype("float32")
    y = rng.uniform(0, 1, (4096, 1)).astype("float32")
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch).repeat()
    model = tf.keras.Sequential([tf.keras.layers.Input((32,))] +
                                [tf.keras.layers.Dense(width, activation="relu")
                                 for _ in range(3)] + [tf.keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    return model, data

def digest(model):
    h = hashlib.sha256()
    for value in model.get_weights() + [v.numpy() for v in model.optimizer.variables]:
        h.update(value.tobytes())
    return h.hexdigest()
'''

@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    with kernel_with_cluster(str(tmp_path_factory.mktemp("diagnose-kernel"))) as session:
        session.ok("%%tfdist\n" + SETUP)
        yield session


def diagnose(kernel, train_cell, line="%tfdist diagnose"):
    kernel.ok("%%tfdist --no-checkpoint\n" + train_cell + "\nbefore = digest(model)",
              timeout=240)
    out = kernel.ok(f"d = {line}\nprint(repr(d.workers))", timeout=300)
    workers = eval(out.stdout.strip().splitlines()[-1], {"WorkerTimings": WorkerTimings})
    shown = kernel.ok("d", timeout=60)
    untouched = kernel.ok("%%tfdist --all-output\nprint('SAME', digest(model) == before)")
    assert untouched.stdout.count("SAME True") == 2, untouched.stdout
    return Diagnosis(workers), shown


def assert_parts_measured(diagnosis):
    for worker in diagnosis.workers:
        assert worker.step > 0 and worker.parts_total > 0, worker


def test_nothing_to_diagnose_before_a_fit(kernel):
    out = kernel.execute("%tfdist diagnose", timeout=60)
    assert out.status == "error", out.stdout
    assert out.stderr.strip().startswith("UsageError: nothing to diagnose: no fit() has run"), \
        out.stderr


def test_a_tiny_model_with_a_small_batch_is_communication_bound(kernel):
    diagnosis, shown = diagnose(kernel, "model, data = job(16, 16)\n"
                                        "model.fit(data, epochs=1, steps_per_epoch=5, verbose=0)")
    print(diagnosis)
    assert diagnosis.verdict().startswith("communication-bound: all-reduce is "), \
        diagnosis.verdict()
    assert "a per-worker batch of 32 instead of 8 would cut it to ~" in diagnosis.verdict()
    assert_parts_measured(diagnosis)
    # Shown as the cell's result: the stacked bars and the verdict in words.
    page = shown.results[0]["text/html"]
    png = base64.b64decode(re.search(r"base64,([^\"]+)", page).group(1))
    assert png.startswith(b"\x89PNG") and "communication-bound" in page


def test_a_wide_model_with_a_large_batch_is_compute_bound(kernel):
    diagnosis, _ = diagnose(kernel, "model, data = job(512, 2048)\n"
                                    "model.fit(data, epochs=1, steps_per_epoch=3, verbose=0)",
                            line="%tfdist diagnose --steps 10")
    print(diagnosis)
    assert diagnosis.verdict().startswith("compute-bound: computation is "), diagnosis.verdict()
    assert_parts_measured(diagnosis)
    assert 0 < diagnosis.efficiency < 1


def test_named_model_and_data_and_bad_names(kernel):
    kernel.ok("%%tfdist\nsmall, small_data = job(16, 32)")
    out = kernel.ok("d = %tfdist diagnose --model small --data small_data --steps 5\n"
                    "print(int(d.median('batch')))", timeout=240)
    assert out.stdout.strip().splitlines()[-1] == "16"       # 32 over 2 workers
    out = kernel.execute("%tfdist diagnose --model nope", timeout=60)
    assert out.stderr.strip() == "UsageError: the workers have no variable named 'nope'"
    kernel.ok("%%tfdist\nnot_compiled = tf.keras.Sequential([tf.keras.layers.Dense(1)])")
    out = kernel.execute("%tfdist diagnose --model not_compiled --data small_data", timeout=60)
    assert "not_compiled is not a compiled Keras model" in out.stderr, out.stderr
    kernel.ok("%tfdist status")


def timings(rank=0, **parts):
    values = dict(step=0.010, communication=0.002, input=0.001, compute=0.007, alone=0.0065,
                  batch=64, gradient_bytes=1000)
    values.update(parts)
    return WorkerTimings(rank=rank, **values)


def test_verdicts_from_timings():
    def verdict(**parts):
        return Diagnosis((timings(0, **parts), timings(1, **parts))).verdict()

    assert verdict() == "compute-bound: computation is 70% of each step; scaling efficiency 65%"
    assert verdict(alone=0.009) == ("compute-bound: computation is 70% of each step; scaling "
                                    "well (90% of 2 x one worker)")
    assert verdict(alone=0.004).startswith("compute-bound: computation is 70% of each step, but "
                                           "each worker computes 1.8x slower next to the others")
    assert verdict(input=0.006, compute=0.002).startswith(
        "input-bound: reading a batch is 60% of each step (10.0 ms)")
    # All-reduce 6 ms of 10; 4x the batch: input and compute 4 x 3 ms -> 6 / 19 = 32%.
    assert verdict(communication=0.006, compute=0.002) == (
        "communication-bound: all-reduce is 60% of each step (10.0 ms); a per-worker batch of "
        "256 instead of 64 would cut it to ~32%")
