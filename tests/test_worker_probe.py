"""A silent worker's process is looked at before it is called lost (worker_probe.py):
a real TensorFlow server whose Python holds the GIL still answers gRPC's greeting."""

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
from tfmw_notebook.cluster.cells.worker_probe import grpc_verdict, judge
from tfmw_notebook.protocol.tfconfig import EngineReport

pytestmark = pytest.mark.timeout(300)

# A TensorFlow server on `port`, then a C call that keeps the GIL for a minute.
HOLDS_THE_GIL = """
import ctypes, sys
import tensorflow as tf
port = int(sys.argv[1])
tf.distribute.Server(tf.train.ClusterSpec({"worker": [f"127.0.0.1:{port}"]}),
                     job_name="worker", task_index=0)
print("serving", flush=True)
ctypes.PyDLL(None).sleep(60)
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_all_threads_stopped(pid: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        states = []
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(FileNotFoundError), open(f"/proc/{pid}/task/{task}/stat") as f:
                states.append(f.read().rsplit(")", 1)[1].split()[0])
        if states and all(state in "tT" for state in states):
            return
        assert time.monotonic() < deadline, f"threads of {pid} not stopped: {states}"
        time.sleep(0.05)


@pytest.fixture
def gil_holder():
    port = free_port()
    process = subprocess.Popen([sys.executable, "-c", HOLDS_THE_GIL, str(port)],
                               stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline().strip() == "serving"
        yield process, port
    finally:
        process.kill()
        process.wait(timeout=10)


def test_a_tensorflow_server_answers_while_its_python_holds_the_gil(gil_holder):
    process, port = gil_holder
    time.sleep(0.5)   # well inside the sleep: no Python thread of it can run now
    assert grpc_verdict("127.0.0.1", port) == "busy"
    elsewhere = EngineReport(engine_id=0, host="another-host", address="127.0.0.1", port=port,
                             pid=process.pid)
    assert judge(elsewhere) == "busy"
    here = EngineReport(engine_id=0, host=socket.gethostname(), address="127.0.0.1",
                        port=port, pid=process.pid)
    assert judge(here) == "busy"

    os.kill(process.pid, signal.SIGSTOP)     # the host still takes the connection
    try:
        # Each thread stops when it is next scheduled: on a loaded machine gRPC's could
        # still answer a greeting sent at once.
        _wait_all_threads_stopped(process.pid)
        assert grpc_verdict("127.0.0.1", port, greeting=1.0) == "stopped"
        assert judge(here) == "stopped"
    finally:
        os.kill(process.pid, signal.SIGCONT)

    process.kill()
    process.wait(timeout=10)
    assert grpc_verdict("127.0.0.1", port) == "gone"
    assert judge(here) == "gone"
