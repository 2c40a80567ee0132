"""An engine forked from the fork server (worker/boot/engine_forkserver.py) starts with every
object it shares with the server frozen out of its garbage collector's reach, and its
collector on: a full collection in the engine then walks only what the engine made itself,
instead of writing to (and so copying) every page it shares with the server.

A real engine from a real fork server, asked before it becomes a worker (the bootstrap
freezes what it holds at its end anyway).
"""

from __future__ import annotations

import psutil
import pytest
from tfmw_notebook.cluster.launch.engines import EngineGroup
from tfmw_notebook.protocol.tfconfig import launch_environment

SERVER = "tfmw_notebook.worker.boot.engine_forkserver"


@pytest.mark.timeout(300)
def test_a_forked_engine_collects_only_what_it_made(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    group = EngineGroup.start(1, timeout=120, environment=launch_environment(0))
    try:
        view = group.client[group.ids[0]]
        view.execute("import gc, os\n"
                     "frozen, enabled, pid = gc.get_freeze_count(), gc.isenabled(), os.getpid()\n",
                     block=True)
        seen = view.pull(["frozen", "enabled", "pid"], block=True)
        frozen, enabled, pid = seen
        assert SERVER in " ".join(psutil.Process(psutil.Process(pid).ppid()).cmdline())
        # TensorFlow and the engine's code: hundreds of thousands of objects.
        assert frozen > 100_000, f"only {frozen} objects frozen in the forked engine"
        assert enabled, "the engine's garbage collector is off"
    finally:
        group.stop()
