"""worker/corrections/other_strategy_scope.py in one process: which scopes step aside, which still
fail.

Real TensorFlow in a child process (the patch is process-wide): a one-worker
MultiWorkerMirroredStrategy plays the shared strategy, entered through `RunnerScope` as the
cell runner enters it. Another strategy's scope makes it the current strategy and gives the
shared one back after, also when the block raises; what fails in one process still fails
with TensorFlow's own error (another strategy inside the cell's own shared scope, a third
strategy inside the other's); a scope the cell opened in between (a device scope) is not
stepped over; MirroredStrategy warns that it trains each worker on its own.
"""

import json
import os
import subprocess
import sys

import pytest

SCENARIOS = '''
import json, warnings
import tensorflow as tf
from tfmw_notebook.worker.corrections import other_strategy_scope as scopes

shared = tf.distribute.MultiWorkerMirroredStrategy()
other = tf.distribute.OneDeviceStrategy("/cpu:0")
outcome = {}

def attempt(name, block):
    try:
        outcome[name] = block()
    except RuntimeError as exc:
        outcome[name] = str(exc).split(":")[0]
    outcome[name + " then"] = tf.distribute.get_strategy() is shared

def other_block():
    with other.scope():
        return [tf.distribute.get_strategy() is other, type(tf.Variable(1.0)).__name__]

def in_own_shared_scope():
    with shared.scope(), other.scope():
        return "entered"

def third_inside_other():
    with other.scope(), tf.distribute.OneDeviceStrategy("/cpu:0").scope():
        return "entered"

def raising_inside():
    with other.scope():
        raise RuntimeError("raised in the block")

def inside_device_scope():
    with tf.device("/cpu:0"), other.scope():
        return "entered"

def mirrored():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mirrored = tf.distribute.MirroredStrategy()
        with mirrored.scope():
            current = tf.distribute.get_strategy() is mirrored
    return [current, [type(w.message).__name__ for w in caught]]

scopes.install()
with scopes.RunnerScope(shared):
    outcome["shared"] = type(tf.Variable(1.0)).__name__
    for block in (other_block, in_own_shared_scope, third_inside_other, raising_inside,
                  inside_device_scope, other_block, mirrored):
        attempt(block.__name__, block)
outcome["after the cell"] = tf.distribute.has_strategy()
with other.scope():          # no cell running: TensorFlow's own behaviour
    outcome["outside a cell"] = tf.distribute.get_strategy() is other
print(json.dumps(outcome))
'''

MIXING = "Mixing different tf.distribute.Strategy objects"


def _run() -> dict:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": "-1"}
    env.pop("TF_CONFIG", None)
    out = subprocess.run([sys.executable, "-c", SCENARIOS], env=env,
                         capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.timeout(300)
def test_scopes_of_another_strategy_in_one_process():
    outcome = _run()
    assert outcome == {
        "shared": "MirroredVariable",
        "other_block": [True, "ResourceVariable"], "other_block then": True,
        "in_own_shared_scope": MIXING, "in_own_shared_scope then": True,
        "third_inside_other": MIXING, "third_inside_other then": True,
        "raising_inside": "raised in the block", "raising_inside then": True,
        "inside_device_scope": MIXING, "inside_device_scope then": True,
        "mirrored": [True, ["TFDistWarning"]], "mirrored then": True,
        "after the cell": False, "outside a cell": True,
    }

