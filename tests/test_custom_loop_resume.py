"""Exact resume of a custom training loop on a real 2-worker cluster: the recipe of
docs/checkpoints.md ("Custom loops: exact resume"), read from that page so the two cannot
drift apart, killed at a step and run again ends with the undisturbed run's weights.

The loop checkpoints its step counter, model, optimizer and input iterator every 10 steps
(tf.train.CheckpointManager) and restores the latest checkpoint before its first step. A
worker is killed (SIGKILL of its own pid, a marker file per step, as test_exact_resume.py
does) between two saves or right after one; the cell is run again by `--max-restarts`, or
by `%tfdist restart` and running it again. The sha256 of every model and optimizer weight,
the step and the batch each worker's iterator gives next must equal the
undisturbed run's: the steps after the last save are trained again on the same batches.
Both step shapes of the page (`strategy.run`, and a step written for one process) on the
default workers: `tf.keras` is tf-keras, `import keras` Keras 3.
"""

from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest

from kernel_session import kernel_with_cluster

pytestmark = pytest.mark.timeout(300)

PAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs",
                    "checkpoints.md")
SECTION = "## Custom loops: exact resume"

SETUP = '''
import os, signal, hashlib, json
import numpy as np
rng = np.random.RandomState(0)
x = rng.uniform(0, 1, (1000, 8)).astype("float32")
y = (x @ rng.uniform(-1, 1, (8, 1))).astype("float32") + 5

def maybe_kill(step):
    """SIGKILL of rank RANKS[i] once at step KILLS[i] (a marker file per step)."""
    marker = os.path.join(MARKS, f"killed-{step}")
    if step in KILLS and tfdist.rank == RANKS[KILLS.index(step)] \\
            and not os.path.exists(marker):
        open(marker, "w").close()
        os.kill(os.getpid(), signal.SIGKILL)

def digest(value):
    return hashlib.sha256(np.asarray(value).tobytes()).hexdigest()
'''

# Appended to the recipe: what the run ended with, on this worker.
RESULT = '''
result = json.dumps({"step": int(step),
                     "sha256": [digest(v.numpy()) for v in model.weights + optimizer.variables],
                     "next": [digest(t.numpy()) for t in next(iterator)]})
'''


def recipe_blocks(path: str = PAGE) -> list[str]:
    """The Python code blocks of the page's section SECTION."""
    with open(path) as f:
        text = f.read()
    assert SECTION in text, f"no {SECTION!r} section in {path}"
    section = re.split(r"\n## ", text.split(SECTION, 1)[1])[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def replaced(code: str, replacements: dict[str, str]) -> str:
    """`code` with each old -> new applied; each must occur (else the recipe changed)."""
    for old, new in replacements.items():
        assert old in code, f"the recipe no longer contains {old!r}: update the test"
        code = code.replace(old, new)
    return code


def loop_cell(style: str, keras: int) -> tuple[str, str]:
    """The recipe's magic line and body: `strategy.run` ("run") or the page's step written
    for one process ("tape"), tf-keras or Keras 3, its checkpoints under CKPT_DIR and
    maybe_kill after each step's save."""
    recipe, one_process_step = recipe_blocks()
    magic, body = recipe.split("\n", 1)
    if style == "tape":
        body, found = re.subn(r"@tf\.function\ndef train_step\(.*?\n\n",
                              lambda _: one_process_step + "\n", body, flags=re.S)
        assert found == 1, "the recipe's train_step is no longer one block"
    body = replaced(body, {'"ckpts/loop-1"': "CKPT_DIR",
                           "manager.save(checkpoint_number=step)\n":
                               "manager.save(checkpoint_number=step)\n"
                               "    maybe_kill(int(step))\n"})
    if keras == 3:
        body = "import keras\n" + replaced(body, {"tf.keras.": "keras."})
    return magic, body + RESULT


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    with kernel_with_cluster(str(tmp_path_factory.mktemp("loop-resume"))) as session:
        yield session


def setup_cell(kernel, where, kills, ranks) -> None:
    kernel.ok(f"%%tfdist\nKILLS = {list(kills)!r}\nRANKS = {list(ranks)!r}\n"
              f"MARKS = {str(where / 'marks')!r}\nCKPT_DIR = {str(where / 'ckpts')!r}\n"
              + SETUP)


def trained(kernel, where, *, style, keras, kills=(), ranks=(), by="--max-restarts"):
    """Each worker's result of the recipe run in `where` (its checkpoints, its markers) with
    rank ranks[i] killed at step kills[i], and the cell's output (of the rerun, for
    `by="%tfdist restart"`)."""
    where.mkdir()
    (where / "marks").mkdir()
    setup_cell(kernel, where, kills, ranks)
    magic, body = loop_cell(style, keras)
    assert magic.startswith("%%tfdist --max-restarts 2"), magic
    if by == "--max-restarts":
        out = kernel.execute(f"{magic} --no-dashboard\n{body}", timeout=240)
    else:
        killed = kernel.execute(f"%%tfdist --no-dashboard\n{body}", timeout=120)
        assert killed.status == "error", killed.stdout + killed.stderr
        kernel.ok("%tfdist restart", timeout=120)
        setup_cell(kernel, where, kills, ranks)
        out = kernel.execute(f"%%tfdist --no-dashboard\n{body}", timeout=120)
    assert out.status == "ok", out.error_text + out.stderr
    results = kernel.ok("import json\nfrom tfmw_notebook.magics.session import "
                        "active_cluster as _c\nprint(json.dumps([_c().pull(['result'], "
                        "rank=r)['result'] for r in range(2)]))").stdout.strip()
    workers = [json.loads(r) for r in json.loads(results.splitlines()[-1])]
    # The chief's two last checkpoints and its state file: nothing another worker wrote.
    assert {name.split(".")[0] for name in os.listdir(where / "ckpts")} == \
        {"checkpoint", "ckpt-30", "ckpt-40"}
    assert workers[0]["sha256"] == workers[1]["sha256"]
    assert workers[0]["next"] != workers[1]["next"]   # each worker its own rows
    return workers, out


_undisturbed: dict[tuple[str, int], list[dict]] = {}


def undisturbed(kernel, tmp_path_factory, style: str, keras: int) -> list[dict]:
    """The recipe's result run with no kill (once per shape and Keras in this module)."""
    if (style, keras) not in _undisturbed:
        where = tmp_path_factory.mktemp(f"undisturbed-{style}-{keras}") / "run"
        workers, out = trained(kernel, where, style=style, keras=keras)
        assert "starting at step 0" in out.stdout and "restart" not in out.stderr
        _undisturbed[(style, keras)] = workers
    return _undisturbed[(style, keras)]


def assert_as_undisturbed(resumed: list[dict], alone: list[dict]) -> None:
    for rank, (ours, theirs) in enumerate(zip(resumed, alone)):
        assert ours["step"] == theirs["step"] == 40, rank
        assert ours["sha256"] == theirs["sha256"], rank
        assert ours["next"] == theirs["next"], rank   # the iterator ends where it ended


@pytest.mark.parametrize("style, keras", [("run", 2), ("tape", 2), ("run", 3), ("tape", 3)])
def test_a_loop_killed_between_saves_ends_with_the_undisturbed_weights(
        kernel, tmp_path, tmp_path_factory, style, keras):
    """Worker 1 killed at step 25: the rerun restores step 20's checkpoint (its iterator
    20 batches in) and trains steps 21-25 again on the same batches."""
    alone = undisturbed(kernel, tmp_path_factory, style, keras)
    resumed, out = trained(kernel, tmp_path / "run", style=style, keras=keras,
                           kills=[25], ranks=[1])
    assert "restart 1 of 2" in out.stderr, out.stderr
    assert "starting at step 20" in out.stdout, out.stdout
    assert_as_undisturbed(resumed, alone)


def test_the_chief_killed_right_after_a_save_then_a_worker_between_saves(
        kernel, tmp_path, tmp_path_factory):
    """Worker 0 (the chief, which writes the checkpoints) killed right after its save at
    step 20, then worker 1 at step 33: the reruns start at 20 and at 30."""
    alone = undisturbed(kernel, tmp_path_factory, "run", 2)
    resumed, out = trained(kernel, tmp_path / "run", style="run", keras=2,
                           kills=[20, 33], ranks=[0, 1])
    assert "restart 2 of 2" in out.stderr, out.stderr
    assert "starting at step 20" in out.stdout and "starting at step 30" in out.stdout, \
        out.stdout
    assert_as_undisturbed(resumed, alone)


def test_a_killed_loop_run_again_after_tfdist_restart_ends_with_the_undisturbed_weights(
        kernel, tmp_path, tmp_path_factory):
    """No --max-restarts: the cell fails with the dead worker; `%tfdist restart` gives
    fresh workers, and the same cells run again resume from step 20's checkpoint."""
    alone = undisturbed(kernel, tmp_path_factory, "tape", 2)
    resumed, out = trained(kernel, tmp_path / "run", style="tape", keras=2, kills=[25],
                           ranks=[1], by="%tfdist restart")
    assert "starting at step 20" in out.stdout, out.stdout
    assert_as_undisturbed(resumed, alone)


# After a resize: the weights as values (they can only be close), and each worker's rows of
# the next batch, which laid end to end in rank order are the next global batch.
RESIZE_RESULT = '''
result = json.dumps({"step": int(step), "loss": float(loss),
                     "weights": [np.asarray(v.numpy()).tolist() for v in model.weights],
                     "next": [np.asarray(t.numpy()).tolist() for t in next(iterator)]})
'''
GLOBAL = 60   # the recipe's batch(64) made one that 2 and 3 workers share evenly


def resize_cell() -> str:
    magic, body = loop_cell("run", 2)
    body = replaced(body[:-len(RESULT)], {".batch(64)": f".batch({GLOBAL})"})
    return f"%%tfdist --no-dashboard\n{body}{RESIZE_RESULT}"


def resize_results(kernel) -> list[dict]:
    out = kernel.ok("import json\nfrom tfmw_notebook.magics.session import active_cluster as "
                    "_c\nprint(json.dumps([_c().pull(['result'], rank=r)['result'] for r in "
                    "range(_c().size)]))")
    return [json.loads(r) for r in json.loads(out.stdout.strip().splitlines()[-1])]


def next_global_batch(workers: list[dict]) -> list:
    """The workers' rows of their next batch, in rank order: the next global batch."""
    return [sum((w["next"][part] for w in workers), []) for part in range(2)]


def test_a_loop_killed_on_2_workers_resumes_after_a_resize_to_3(tmp_path):
    """The recipe (global batch 60) killed at step 25 on 2 workers, `%tfdist resize -n 3`,
    the cell run again: every worker, the new one too, restores step 20's checkpoint (the
    chief's files: each worker's iterator is the pipeline's own, over global batches), the
    loop trains steps 21-40 with each global batch cut in 3, and ends within floating-point
    tolerance of the undisturbed 2-worker run, its iterator at the same global batch.
    Measured: largest weight difference 6e-8, final loss equal."""
    (tmp_path / "kernel").mkdir()
    with kernel_with_cluster(str(tmp_path / "kernel")) as kernel:
        alone_dir, run = tmp_path / "alone", tmp_path / "run"
        for where in (alone_dir, run):
            (where / "marks").mkdir(parents=True)
        setup_cell(kernel, alone_dir, [], [])
        kernel.ok(resize_cell(), timeout=240)
        alone = resize_results(kernel)
        setup_cell(kernel, run, [25], [1])
        killed = kernel.execute(resize_cell(), timeout=240)
        assert killed.status == "error", killed.stdout + killed.stderr
        out = kernel.ok("%tfdist resize -n 3", timeout=240)
        assert "resized: 3 workers" in out.stdout, out.stdout
        setup_cell(kernel, run, [25], [1])
        out = kernel.ok(resize_cell(), timeout=240)
        assert "starting at step 20" in out.stdout, out.stdout
        resumed = resize_results(kernel)
    assert len(resumed) == 3 and all(r["step"] == 40 for r in resumed)
    assert all(r["weights"] == resumed[0]["weights"] for r in resumed)
    assert next_global_batch(resumed) == next_global_batch(alone)
    for i, (a, b) in enumerate(zip(alone[0]["weights"], resumed[0]["weights"])):
        a, b = np.asarray(a), np.asarray(b)
        assert np.allclose(b, a, rtol=1e-5, atol=1e-6), \
            f"weight {i}: largest difference {np.abs(b - a).max():.3g}"
    assert resumed[0]["loss"] == pytest.approx(alone[0]["loss"], rel=1e-5)
