"""`%%tfdist --sweep` on a real 2-worker cluster (the session's shared one, Keras 3):
the trials run on the same engine processes with their values bound on every worker,
a seeded random sweep repeats itself, a trial that raises ends alone, and --prune median
stops a diverging trial on every worker at the same epoch."""

import json

import pytest

pytestmark = pytest.mark.timeout(600)

SETUP = """\
%%tfdist --no-dashboard
import os
import numpy as np
rng = np.random.default_rng(0)
x = rng.normal(size=(128, 8)).astype("float32")
y = (x @ rng.normal(size=(8, 1))).astype("float32")
seen = []

def build(lr):
    tf.keras.utils.set_random_seed(1)
    model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(8, activation="relu"),
                                 tf.keras.layers.Dense(1)])
    model.compile(optimizer=tf.keras.optimizers.SGD(lr), loss="mse")
    return model
"""

PULL_SEEN = """\
import json
from tfmw_notebook import active_cluster
_c = active_cluster()
print(json.dumps({"seen": [_c.pull(["seen"], rank=r)["seen"] for r in range(_c.size)],
                  "pids": [row["pid"] for row in _c.status()]}))
"""

RESULT = """\
import json
print(json.dumps({"records": _sweep.records(), "summary": _sweep.summary(),
                  "seed": _sweep.plan.seed}))
"""

RUNS = """\
import json
from tfmw_notebook import list_runs
print(json.dumps([{"name": r["name"], "sweep": r["sweep"], "outcome": r["outcome"]}
                  for r in list_runs(root="tfdist_checkpoints").records()]))
"""


def _json(kernel, code):
    return json.loads(kernel.ok(code).stdout.strip().splitlines()[-1])


def _sweep(kernel, line, body, timeout=240):
    out = kernel.ok(f"%%tfdist {line}\n{body}", timeout=timeout)
    kernel.ok("_sweep = _")
    return out, _json(kernel, RESULT)


def _reset_seen(kernel):
    kernel.ok("%%tfdist --no-dashboard --no-checkpoint\nseen = []")


def test_a_grid_runs_on_the_same_workers_and_a_raising_trial_ends_alone(tf_kernel):
    tf_kernel.ok(SETUP, timeout=120)
    before = _json(tf_kernel, PULL_SEEN)["pids"]
    out, result = _sweep(
        tf_kernel, "--sweep lr=0.001,0.01,0.02 --sweep batch=16,32 --no-dashboard "
                   "--no-checkpoint",
        "seen.append([os.getpid(), lr, type(lr).__name__, batch, type(batch).__name__])\n"
        "history = build(lr).fit(x, y, batch_size=batch, epochs=2, steps_per_epoch=2, "
        "verbose=0)\n"
        "if lr == 0.001 and batch == 32 and tfdist.rank == 1:\n"
        "    raise ValueError('trial two breaks on rank 1')\n")
    records = result["records"]
    assert [r["values"] for r in records] == [{"lr": lr, "batch": b} for lr in
                                             (0.001, 0.01, 0.02) for b in (16, 32)]
    assert [r["outcome"] for r in records] == ["completed", "failed"] + ["completed"] * 4, \
        records
    assert "trial two breaks on rank 1" in records[1]["error"]
    assert all(len(r["history"]) == 2 and r["metric"] == "loss" for r in records
               if r["outcome"] == "completed")
    assert "6 of 6 trials: 5 completed, 1 failed; best: trial" in result["summary"]
    assert "trial two breaks on rank 1" in out.stderr   # the failing rank's traceback
    assert "tfdist: trial 2: worker 1 failed: ValueError: trial two breaks on rank 1. Every " \
        "worker finished the cell, so the workers were kept" in out.stderr
    after = _json(tf_kernel, PULL_SEEN)
    assert after["pids"] == before   # no restart between trials
    for rank, seen in enumerate(after["seen"]):
        assert [row[0] for row in seen] == [before[rank]] * 6
        assert [row[1:] for row in seen] == [[lr, "float", b, "int"] for lr in
                                             (0.001, 0.01, 0.02) for b in (16, 32)]
    assert any("tfdist-sweep" in bundle.get("text/html", "")
               for bundle in out.results + out.updates)
    # Each trial is a run of its own, named after the sweep and holding its values.
    runs = _json(tf_kernel, RUNS)
    trials = [r for r in runs if r["sweep"]][-6:]
    base = trials[0]["name"].rsplit("-trial-", 1)[0]
    assert [r["name"] for r in trials] == [f"{base}-trial-{n}" for n in range(1, 7)]
    assert [r["sweep"] for r in trials] == [r["values"] for r in records]
    # trial 2's fit returned before its cell raised: the run (the fit) completed
    assert [r["outcome"] for r in trials] == ["completed"] * 6


def test_a_seeded_random_sweep_repeats_and_median_pruning_stops_a_diverging_trial(tf_kernel):
    tf_kernel.ok(SETUP, timeout=120)
    pids = _json(tf_kernel, PULL_SEEN)["pids"]
    line = "--trials 3 --seed 0 --sweep lr=loguniform:1e-4:1e-1 --no-dashboard --no-checkpoint"
    body = "seen.append([os.getpid(), lr])"
    first = _sweep(tf_kernel, line, body)[1]["records"]
    second = _sweep(tf_kernel, line, body)[1]["records"]
    values = [r["values"]["lr"] for r in first]
    assert values == [r["values"]["lr"] for r in second] and len(set(values)) == 3
    assert all(1e-4 <= lr <= 1e-1 for lr in values)
    seen = _json(tf_kernel, PULL_SEEN)
    assert seen["pids"] == pids
    for rank, rows in enumerate(seen["seen"]):
        assert rows == [[pids[rank], lr] for lr in values + values]

    _reset_seen(tf_kernel)   # with the dashboard on: its callback runs beside the monitor
    out, result = _sweep(
        tf_kernel, "--sweep lr=0.01,0.02,50.0 --prune median --monitor loss",
        "history = build(lr).fit(x, y, batch_size=16, epochs=3, steps_per_epoch=4, "
        "verbose=0)\nseen.append(len(history.history['loss']))\n")
    records = result["records"]
    assert [r["outcome"] for r in records] == ["completed", "completed", "pruned"], records
    # the pruned trial's run record says so too (and so would its MLflow run)
    assert [r["outcome"] for r in _json(tf_kernel, RUNS)[-3:]] == [
        "completed", "completed", "pruned"]
    assert records[2]["pruned_at"] == 1 and len(records[2]["history"]) == 1, records
    # every worker stopped its fit after the first epoch
    assert _json(tf_kernel, PULL_SEEN)["seen"] == [[3, 3, 1], [3, 3, 1]]
    best = min(records[:2], key=lambda r: r["final"])
    assert best["checkpoint_dir"] and best["checkpoint_dir"].endswith(
        f"-trial-{best['trial']}")
    assert f"best: trial {best['trial']}" in result["summary"]
    assert f"checkpoints in {best['checkpoint_dir']}" in result["summary"]
