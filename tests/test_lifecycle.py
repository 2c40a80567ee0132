"""`%tfdist stop`, kernel shutdown and a killed kernel end every process the cluster
started; stop frees TF's ports."""

import json
import os
import signal
import socket
import time

import psutil
import pytest

import net_exposure
from kernel_session import KernelSession

pytestmark = pytest.mark.timeout(240)


def started_processes(kernel):
    """Every process below the kernel: controller, engines and their helpers."""
    return [p for p in psutil.Process(kernel.kernel_pid()).children(recursive=True)
            if p.is_running()]


def wait_gone(processes, seconds):
    deadline = time.monotonic() + seconds
    alive = processes
    while alive and time.monotonic() < deadline:
        time.sleep(0.1)
        alive = [p for p in processes
                 if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    return alive


def tf_servers(kernel):
    """(pid, port) of each worker's TensorFlow server."""
    out = kernel.ok("import json\nfrom tfmw_notebook.magics.session import active_cluster\n"
                    "print(json.dumps([[w.pid, w.port] for w in active_cluster().workers]))")
    return json.loads(out.stdout.strip().splitlines()[-1])


def port_is_free(port):
    """Nothing listens on it (SO_REUSEADDR: connections in TIME_WAIT don't count)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("", port))
        except OSError:
            return False
    return True


@pytest.mark.parametrize("isolation", ["", " --no-isolation"], ids=["isolated", "host-network"])
def test_stop_ends_every_process_and_frees_the_ports(tmp_path, isolation):
    kernel = KernelSession(cwd=str(tmp_path))
    try:
        kernel.ok(f"%load_ext tfmw_notebook\n%tfdist start -n 2{isolation}", timeout=180)
        servers = tf_servers(kernel)
        processes = started_processes(kernel)
        assert len(processes) >= 3  # the controller and two engines at least
        # TF's servers listen: in the workers' private network, or in this machine's.
        for pid, port in servers:
            assert port in [p for _, p in net_exposure.listening(pid)]
            assert port_is_free(port) == (not isolation)

        kernel.ok("from tfmw_notebook.magics.session import active_cluster\n"
                  "first_client = active_cluster()._group.client")
        assert kernel.ok("%tfdist stop", timeout=60).stdout.strip() == "stopped 2 workers"
        assert wait_gone(processes, 15) == []   # a private network ends with its last process
        assert all(port_is_free(port) for _, port in servers)
        # Its client is closed: left open, its sockets would dial the old controller's
        # ports, and reach (and complain of) a later controller that got one of them.
        assert kernel.ok("print(first_client._closed)").stdout.strip() == "True"
        # ...and the kernel can start a new cluster afterwards.
        kernel.ok(f"%tfdist start -n 2{isolation}", timeout=180)
        assert kernel.ok("%%tfdist\ntfdist.world_size").results[-1]["text/plain"] == "2"
        kernel.ok("%tfdist stop", timeout=60)
    finally:
        kernel.shutdown()


def test_kernel_shutdown_ends_the_cluster(tmp_path):
    kernel = KernelSession(cwd=str(tmp_path))
    try:
        kernel.ok("%load_ext tfmw_notebook\n%tfdist start -n 2", timeout=180)
        processes = started_processes(kernel)
        assert len(processes) >= 3
    finally:
        kernel.shutdown()  # no %tfdist stop: what a kernel restart does
    assert wait_gone(processes, 30) == []


def test_a_killed_kernel_takes_its_cluster_with_it(tmp_path):
    """SIGKILL (OOM, a forced restart) skips every exit handler: the controller and
    engines notice they lost their parent and end themselves."""
    kernel = KernelSession(cwd=str(tmp_path))
    try:
        kernel.ok("%load_ext tfmw_notebook\n%tfdist start -n 2", timeout=180)
        processes = started_processes(kernel)
        assert len(processes) >= 3
        assert "tfmw_notebook" not in kernel.ok("%%tfdist\nsorted(dir())").results[-1]["text/plain"]
        os.kill(kernel.kernel_pid(), signal.SIGKILL)
        assert wait_gone(processes, 20) == []
    finally:
        kernel.client.stop_channels()
