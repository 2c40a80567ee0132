"""`%tfdist resize -n N`: another number of workers holding the state the old ones had.

Real cluster, real kernel: a fit on 2 workers, then 2 -> 3 -> 2. After each resize every
new worker holds the old workers' weights and optimizer state (digest), and a fit runs on
all of them in step. Bad input changes nothing.
"""

from __future__ import annotations

import json
import re

import pytest

from kernel_session import kernel_with_cluster, per_worker
from seed_code import MNIST_SETUP

pytestmark = pytest.mark.timeout(420)

FIT = '''
model.fit(mnist_dataset(64), epochs=1, steps_per_epoch=3, verbose=0)
'''
DIGEST = '''
import hashlib
digest = hashlib.sha256(b"".join(v.tobytes() for v in model.get_weights()
                                 + [w.numpy() for w in model.optimizer.variables])).hexdigest()
'''


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    with kernel_with_cluster(str(tmp_path_factory.mktemp("resize-kernel"))) as session:
        session.ok("%%tfdist\n" + MNIST_SETUP)
        session.ok("%%tfdist\nmodel = build_and_compile_cnn_model()\n" + FIT, timeout=180)
        yield session


def _digests(kernel) -> list[str]:
    kernel.ok("%%tfdist\n" + DIGEST)
    return per_worker(kernel, "digest")


def _newest_runs_cluster(kernel) -> dict:
    out = kernel.ok("import json\nfrom tfmw_notebook import list_runs\n"
                    "print(json.dumps(list_runs().records()[-1]['cluster']))")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _resize_keeps_the_state_and_trains_in_step(kernel, n: int) -> None:
    was = _newest_runs_cluster(kernel)["workers"]
    before = set(_digests(kernel))
    assert len(before) == 1
    out = kernel.ok(f"%tfdist resize -n {n}", timeout=240)
    assert "resized:" in out.stdout and f"{n} workers" in out.stdout, out.stdout
    assert re.search(r"\d fits? restored from checkpoints\)", out.stdout), out.stdout
    assert f"each worker now takes 1/{n}" in out.stdout
    after = _digests(kernel)
    assert len(after) == n and set(after) == before          # the old workers' state
    kernel.ok("%%tfdist\n" + FIT, timeout=180)
    trained = _digests(kernel)
    assert len(set(trained)) == 1 and set(trained) != before  # trained, in step
    # The fit's run record says it ran on the resized cluster, and from what size.
    noted = _newest_runs_cluster(kernel)
    assert noted["workers"] == n and noted["resized_from"] == was, noted


def test_growing_to_three_workers_keeps_the_model_and_trains_in_step(kernel):
    _resize_keeps_the_state_and_trains_in_step(kernel, 3)


def test_shrinking_back_to_two_keeps_the_model_and_trains_in_step(kernel):
    _resize_keeps_the_state_and_trains_in_step(kernel, 2)


def test_a_resize_to_no_workers_is_refused_and_changes_nothing(kernel):
    digests = _digests(kernel)
    out = kernel.execute("%tfdist resize -n 0")
    # IPython shows a UsageError as one stderr line.
    lines = out.stderr.strip().splitlines()
    assert out.status == "error" and len(lines) == 1, out.stderr
    assert lines[0].startswith("UsageError: ") and "expected a whole number >= 1, got 0" \
        in lines[0], lines
    assert _digests(kernel) == digests


def test_a_resize_while_a_cell_runs_is_refused(kernel):
    """The Python API from another thread: the cell goes on, the resize is refused."""
    out = kernel.ok(
        "import threading, time\n"
        "from tfmw_notebook.magics.session import active_cluster\n"
        "_c = active_cluster()\n"
        "_t = threading.Thread(target=_c.run, args=('import time; time.sleep(3)',))\n"
        "_t.start()\n"
        "time.sleep(1)\n"
        "try:\n"
        "    _c.resize(3)\n"
        "except Exception as exc:\n"
        "    print(type(exc).__name__, exc)\n"
        "_t.join(30)\n"
        "print('workers', _c.size)", timeout=60)
    assert "BadArgument a cell is running on the workers: resize once it has ended" in out.stdout
    assert "workers 2" in out.stdout
