"""An engine that imports TensorFlow itself (worker/boot/preimport.py: not forked from a
fork server, e.g. a spare of an attached cluster) does so with Python's garbage collector
off, and on again afterwards: full collections during the import cost a quarter of its
CPU time. A real import in a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

PROGRAM = """
import gc, json, threading
import tfmw_notebook.worker.boot.preimport
for thread in threading.enumerate():
    if thread.name == "tfmw-preimport":
        thread.join(240)
import tensorflow
print(json.dumps({"full_collections": gc.get_stats()[2]["collections"],
                  "enabled": gc.isenabled(), "imported": hasattr(tensorflow, "constant")}))
"""


@pytest.mark.timeout(300)
def test_tensorflow_is_imported_without_full_collections():
    done = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True,
                          timeout=280, env=None)
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["imported"] and seen["enabled"]
    assert seen["full_collections"] == 0, seen
