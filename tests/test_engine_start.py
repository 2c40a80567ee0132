"""Starting engines on a busy machine: a slow controller, engines that end at once.

Real ipyparallel controllers and engine processes. Our engines start before the
controller and wait for its connection file; on a loaded 2-core machine the
controller can take longer than ipyparallel's default 10 s wait, and the engines
used to give up silently, leaving the start to wait out its whole timeout.
"""

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import ipyparallel as ipp
import pytest
from tfmw_notebook import ClusterSetupError
from tfmw_notebook.cluster.launch import engines, launched_engines
from tfmw_notebook.cluster.launch.engines import EngineGroup

pytestmark = pytest.mark.timeout(180)


def test_engines_wait_for_a_controller_slower_than_ten_seconds(monkeypatch):
    start_controller = ipp.Cluster.start_controller

    async def late_start_controller(self, *args, **kwargs):
        await asyncio.sleep(12)  # as a controller starved of CPU while engines import TF
        return await start_controller(self, *args, **kwargs)

    monkeypatch.setattr(ipp.Cluster, "start_controller", late_start_controller)
    group = EngineGroup.start(2, timeout=60)
    try:
        assert len(group.ids) == 2
        assert group.registered() >= set(group.ids)
    finally:
        group.stop()


@pytest.mark.parametrize("after, in_event_loop", [(0.0, False), (2.0, False), (0.0, True)])
def test_engines_that_end_before_registering_fail_the_start_at_once(monkeypatch, after,
                                                                    in_event_loop):
    # An engine command that prints a complaint and exits, as a broken environment would,
    # at once or a little later. Called from a running event loop, as in a kernel,
    # ipyparallel runs its own loop in a thread and moves ended engines out of their
    # set; called from plain code, only the engines' processes are gone.
    monkeypatch.setattr(engines, "_ENGINE_COMMAND", [
        sys.executable, "-c", f"import time; time.sleep({after}); "
        "print('engine cannot start: no such thing'); raise SystemExit(3)"])
    # Launched as the command itself, not as a fork server's stand-ins (whose processes
    # end as their engines end: test_engine_forks.py).
    monkeypatch.setattr(engines, "_fork_server", lambda *args: None)

    async def start_in_a_running_loop():
        EngineGroup.start(2, timeout=90, environment={"TFMW_TEST": "1"})

    def start():
        if in_event_loop:
            asyncio.run(start_in_a_running_loop())
        else:
            EngineGroup.start(2, timeout=90, environment={"TFMW_TEST": "1"})

    began = time.monotonic()
    # A thread of its own: whatever loop earlier tests left in this one stays out.
    with pytest.raises(ClusterSetupError) as caught, ThreadPoolExecutor(1) as pool:
        pool.submit(start).result(timeout=120)
    message = str(caught.value)
    assert time.monotonic() - began < 45, "waited for the timeout instead of noticing"
    assert "ended before they registered" in message
    assert "engine cannot start: no such thing" in message
    assert "\n" not in message


def test_a_connection_file_is_never_seen_half_written(tmp_path):
    # Engines poll for the controller's file and read it as soon as it exists: a reader
    # must find no file or all of it.
    from tfmw_notebook.cluster.launch.controller import write_whole

    path = str(tmp_path / "ipcontroller-x-engine.json")
    text = json.dumps({"key": "k" * 400_000})
    seen, stop = [], threading.Event()

    def read_while_written():
        while not stop.is_set():
            try:
                with open(path) as f:
                    seen.append(len(f.read()))
            except FileNotFoundError:
                pass

    reader = threading.Thread(target=read_while_written)
    reader.start()
    try:
        for _ in range(100):
            write_whole(path, text)
    finally:
        stop.set()
        reader.join(timeout=10)
    assert seen and set(seen) == {len(text)}
    assert os.stat(path).st_mode & 0o777 == 0o600       # it holds the session key
    assert os.listdir(tmp_path) == ["ipcontroller-x-engine.json"]   # nothing left aside


def test_the_controller_writes_its_connection_files_for_its_owner_only():
    group = EngineGroup.start(2, timeout=60)
    try:
        security = os.path.join(group.cluster.profile_dir, "security")
        mine = [name for name in os.listdir(security)
                if name.startswith(f"ipcontroller-{group.cluster.cluster_id}-")]
        assert len(mine) == 2   # the engines' file and the clients'
        assert all(os.stat(os.path.join(security, name)).st_mode & 0o777 == 0o600
                   for name in mine)
        assert not [name for name in os.listdir(security) if name.startswith(".tmp-")]
    finally:
        group.stop()


@pytest.mark.unit
def test_a_restart_reads_no_output_of_the_ssh_engines_it_stops(monkeypatch):
    """Stopping an SSH engine set would fetch each engine's output file over scp (polling
    10 s for one that `ipcluster start` already removed); a restart's killed engines' output
    is not read at all."""
    from types import SimpleNamespace

    from ipyparallel.cluster.launcher import LocalEngineLauncher, SSHEngineLauncher

    fetched = []
    monkeypatch.setattr(SSHEngineLauncher, "_fetch_file",
                        lambda self, remote, local, wait=True: fetched.append(remote))
    remote = SSHEngineLauncher(hostname="node1", location="node1")
    local = LocalEngineLauncher()
    engine_set = SimpleNamespace(launchers={"remote": remote, "local": local})
    launched_engines._skip_output_fetch(SimpleNamespace(engines={"set": engine_set}), ["set"])
    assert remote.get_output(remove=True) == "" and fetched == []
    assert local._output is None          # another launcher's output is left as it was


STANDS_FOR_A_KERNEL = """\
import subprocess, sys, time
from tfmw_notebook.protocol.orphan_guard import launched_by_this_process
engine = subprocess.Popen([sys.executable, "-m", "tfmw_notebook.worker.boot.engine_main",
                           f"--IPEngine.url_file={sys.argv[1]}",
                           "--IPEngine.wait_for_url_file=120"],
                          env={**__import__("os").environ, **launched_by_this_process()})
print(engine.pid, flush=True)
time.sleep(600)
"""


def test_an_engine_whose_kernel_is_killed_before_it_registers_ends(tmp_path):
    """The kernel killed while its engines start, before any controller is up: each engine
    ends within seconds (its guard knows the parent it began with), instead of waiting
    for a controller for the start's whole timeout (120 s here) with TensorFlow loaded."""
    import psutil

    kernel = subprocess.Popen([sys.executable, "-c", STANDS_FOR_A_KERNEL,
                               str(tmp_path / "no-controller.json")],
                              stdout=subprocess.PIPE, text=True)
    engine = psutil.Process(int(kernel.stdout.readline()))
    # Killed at once: the engine has not yet imported its package (let alone registered),
    # as when a loaded machine takes seconds to start it.
    kernel.kill()
    kernel.wait(timeout=10)
    began = time.monotonic()
    while _running(engine):
        if time.monotonic() - began > 30:
            engine.kill()
            raise AssertionError("the orphaned engine still ran 30 s after its kernel died")
        time.sleep(0.2)
    print(f"orphaned engine ended {time.monotonic() - began:.1f} s after its kernel")


def _running(process) -> bool:
    import psutil

    try:
        return process.status() != psutil.STATUS_ZOMBIE   # ended, not yet reaped
    except psutil.NoSuchProcess:
        return False
