"""`%tfdist start` keeps the workers' TensorFlow ports away from the network.

Every listening socket of every process the cluster started is looked up in the
network namespace that process is in (net_exposure.py); none may be reachable from
another machine, and dialling the workers' ports at this machine's own addresses
must fail. The same check, run on a cluster started with --no-isolation, finds the
exposed ports: it can fail. The rest of the suite runs with isolation on too.
"""

import json
import os
import re
import sys
import time

import psutil
import pytest

import net_exposure
from kernel_session import KernelSession, kernel_with_extension

pytestmark = pytest.mark.timeout(420)

TRAIN = '''%%tfdist --no-checkpoint
import numpy as np
x = np.random.RandomState(0).uniform(0, 1, (256, 8)).astype("float32")
data = tf.data.Dataset.from_tensor_slices((x, x.sum(axis=1, keepdims=True))).batch(32).repeat()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Input((8,)), tf.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
history = model.fit(data, epochs={epochs}, steps_per_epoch=4, verbose=0, callbacks=[{callback}])
print(len(history.history["loss"]), int(model.optimizer.iterations.numpy()))
'''

KILL_RANK_1_ONCE = '''tf.keras.callbacks.LambdaCallback(on_epoch_end=lambda epoch, logs: (
    tfdist.rank == 1 and epoch == 1 and not os.path.exists({marker!r})
    and (open({marker!r}, "w").close() or os.kill(os.getpid(), 9))))'''


def cluster_pids(kernel):
    return [p.pid for p in psutil.Process(kernel.kernel_pid()).children(recursive=True)
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def workers(kernel):
    out = kernel.ok("import json\nfrom tfmw_notebook import active_cluster\n"
                    "print(json.dumps([[w.pid, w.port] for w in active_cluster().workers]))")
    return json.loads(out.stdout.strip().splitlines()[-1])


def dialled_from_outside(kernel):
    """Worker ports that accept a connection at one of this machine's own addresses."""
    addresses = net_exposure.outside_addresses()
    assert addresses, "this machine needs a non-loopback address to dial"
    return [f"{address}:{port}" for _, port in workers(kernel) for address in addresses
            if net_exposure.accepts(address, port)]


def wait_gone(pids, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        alive = [pid for pid in pids if psutil.pid_exists(pid)
                 and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
        if not alive:
            return []
        time.sleep(0.1)
    return alive


@pytest.fixture
def kernel(tmp_path):
    with kernel_with_extension(str(tmp_path)) as session:
        yield session


def test_workers_are_unreachable_from_other_machines_through_training_failure_and_restart(
        kernel, tmp_path):
    started = kernel.ok("%tfdist start -n 2", timeout=180)
    assert "private network" in started.stdout, started.stdout
    assert "warning" not in started.stderr, started.stderr
    first = workers(kernel)
    namespaces = {net_exposure.netns(pid) for pid, _ in first}
    assert len(namespaces) == 1 and namespaces != {net_exposure.netns("self")}
    assert net_exposure.interfaces(first[0][0]) == ["lo"]
    # TensorFlow's servers do listen (on every interface of their namespace)...
    for pid, port in first:
        assert port in [p for _, p in net_exposure.listening(pid)], (pid, port)
    # ...and neither they nor anything else the cluster started can be reached.
    assert net_exposure.exposed(cluster_pids(kernel)) == []
    assert dialled_from_outside(kernel) == []

    assert "[worker 0] 2 8\n" in kernel.ok(TRAIN.format(epochs=2, callback="")).stdout
    # Nor can the workers reach out: a cell that tries is told why, and what to do.
    reach_out = kernel.execute("%%tfdist\nimport socket\nsocket.create_connection("
                               f"({net_exposure.outside_addresses()[0]!r}, 9), timeout=5)")
    assert reach_out.status == "error" and "Network is unreachable" in reach_out.error_text
    assert "fetch data in the notebook first" in reach_out.error_text, reach_out.error_text

    # A worker killed mid-fit is named, the group restarted, still in the private network.
    kill = KILL_RANK_1_ONCE.format(marker=str(tmp_path / "killed-once"))
    out = kernel.ok("%%tfdist --max-restarts 1\nimport os\n"
                    + TRAIN.format(epochs=3, callback=kill).split("\n", 1)[1], timeout=240)
    assert "restart 1 of 1 after: worker 1" in out.stderr and "died" in out.stderr, out.stderr
    # Resumed from its backup and trained to the end: 3 epochs of 4 steps in all.
    assert re.search(r"\[worker 0\] \d 12\n", out.stdout), out.stdout
    second = workers(kernel)
    assert {pid for pid, _ in second}.isdisjoint(pid for pid, _ in first)
    assert {net_exposure.netns(pid) for pid, _ in second} == namespaces
    assert net_exposure.exposed(cluster_pids(kernel)) == []

    kernel.ok("%tfdist restart", timeout=180)
    third = workers(kernel)
    assert {net_exposure.netns(pid) for pid, _ in third} == namespaces
    assert net_exposure.exposed(cluster_pids(kernel)) == []
    assert dialled_from_outside(kernel) == []
    assert "[worker 0] 1 4\n" in kernel.ok(TRAIN.format(epochs=1, callback="")).stdout

    # The namespace's keeper killed from outside: the next restart makes a new one.
    keeper = [pid for pid in cluster_pids(kernel)
              if "network_keeper.py" in " ".join(psutil.Process(pid).cmdline())]
    assert len(keeper) == 1, keeper
    os.kill(keeper[0], 9)
    # Killed, not still ending as the restart begins (a race only the test could make).
    assert wait_gone(keeper, 10) == [], keeper
    kernel.ok("%tfdist restart", timeout=180)
    fourth = workers(kernel)
    assert len({net_exposure.netns(pid) for pid, _ in fourth}) == 1
    assert {net_exposure.netns(pid) for pid, _ in fourth} != namespaces
    assert net_exposure.interfaces(fourth[0][0]) == ["lo"]
    assert net_exposure.exposed(cluster_pids(kernel)) == []
    assert kernel.ok("%%tfdist\ntfdist.world_size").results[-1]["text/plain"] == "2"

    before_stop = cluster_pids(kernel)
    socket_dir = f"/tmp/tfmw-ipc-{kernel.kernel_pid()}-"
    assert [d for d in os.listdir("/tmp") if f"/tmp/{d}".startswith(socket_dir)]
    kernel.ok("%tfdist stop", timeout=60)
    assert wait_gone(before_stop, 15) == []   # engines, controller and the namespace's keeper
    assert [d for d in os.listdir("/tmp") if f"/tmp/{d}".startswith(socket_dir)] == []


def test_the_check_finds_the_ports_of_a_cluster_started_without_isolation(kernel):
    started = kernel.ok("%tfdist start -n 2 --no-isolation", timeout=180)
    assert "private network" not in started.stdout
    assert "warning" not in started.stderr, started.stderr   # chosen: nothing to warn of
    found = net_exposure.exposed(cluster_pids(kernel))
    ports = [port for _, port in workers(kernel)]
    assert all(any(f":{port} in this machine's network" in line for line in found)
               for port in ports), found
    assert len(dialled_from_outside(kernel)) >= len(ports)


def test_where_isolation_is_impossible_a_one_line_warning_says_so_once(tmp_path):
    # Without util-linux on the PATH (as on macOS) no private network can be made.
    session = KernelSession(cwd=str(tmp_path), env={"PATH": str(tmp_path)})
    try:
        session.ok("%load_ext tfmw_notebook", timeout=60)
        first = session.ok("%tfdist start -n 2", timeout=180)
        warning = [line for line in first.stderr.splitlines() if "warning" in line]
        assert len(warning) == 1, first.stderr
        assert "unshare and nsenter (util-linux) not found" in warning[0]
        assert "every network interface" in warning[0] and "--no-isolation" in warning[0]
        assert session.ok("%%tfdist\ntfdist.world_size").results[-1]["text/plain"] == "2"
        session.ok("%tfdist stop", timeout=60)
        again = session.ok("%tfdist start -n 2", timeout=180)
        assert "warning" not in again.stderr, again.stderr     # said once per kernel
        session.ok("%tfdist stop", timeout=60)
    finally:
        session.shutdown()


LISTENER = ("import socket, time\ns = socket.socket()\ns.bind(('', 0))\ns.listen()\n"
            "print(s.getsockname()[1], flush=True)\ntime.sleep(600)")
UNPRIVILEGED_DRIVER = '''
import json, subprocess, sys
sys.path.insert(0, sys.argv[1])
from private_network import open_private_network
network = open_private_network()
listener = subprocess.Popen(network.command_prefix() + [sys.executable, "-c", sys.argv[2]],
                            stdout=subprocess.PIPE)
port = int(listener.stdout.readline())
print(json.dumps({"keeper": network.keeper_pid, "listener": listener.pid, "port": port,
                  "socket_dir": network.socket_dir,
                  "in_user_namespace": network.in_user_namespace}), flush=True)
sys.stdin.read()   # until the test has looked
listener.kill()
listener.wait()
network.close()
'''
NOBODY = 65534


def python_for(uid):
    """An interpreter user `uid` may run (this one may live in root's home). Run through
    env: setpriv itself may open the file before it drops root."""
    import subprocess

    for python in (sys.executable, "/usr/bin/python3"):
        if os.path.exists(python) and subprocess.run(
                ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "env", python,
                 "-c", "pass"], capture_output=True, timeout=30).returncode == 0:
            return python
    return None


def test_a_user_who_is_not_root_gets_the_private_network_in_a_user_namespace():
    """The path every non-root user takes (the suite runs as root): the same module,
    run by an unprivileged user, puts a process that listens on every interface where
    only this machine can reach it."""
    import shutil
    import subprocess
    import tempfile

    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("switching to an unprivileged user needs root and setpriv")
    python = python_for(NOBODY)
    if python is None:
        pytest.skip("no Python interpreter here that an unprivileged user may run")
    import tfmw_notebook

    package = os.path.dirname(tfmw_notebook.__file__)
    code = tempfile.mkdtemp(prefix="tfmw-test-unprivileged-")   # where that user can read
    os.chmod(code, 0o755)
    for name in ("private_network.py", "network_keeper.py"):
        shutil.copy(os.path.join(package, "cluster", "launch", name), code)
    driver = subprocess.Popen(
        ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", python, "-c",
         UNPRIVILEGED_DRIVER, str(code), LISTENER],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env={"PATH": os.environ["PATH"], "TMPDIR": "/tmp"})
    try:
        line = driver.stdout.readline()
        assert line, driver.stderr.read().decode()
        seen = json.loads(line)
        listener, keeper = seen["listener"], seen["keeper"]
        assert seen["in_user_namespace"]
        with open(f"/proc/{listener}/status") as status:
            uids = next(row for row in status if row.startswith("Uid:")).split()[1:]
        assert set(uids) == {str(NOBODY)}       # really unprivileged, not root in disguise
        assert os.readlink(f"/proc/{listener}/ns/user") != os.readlink("/proc/self/ns/user")
        assert net_exposure.netns(listener) == net_exposure.netns(keeper) != \
            net_exposure.netns("self")
        assert net_exposure.interfaces(listener) == ["lo"]
        assert ("0.0.0.0", seen["port"]) in net_exposure.listening(listener)
        assert net_exposure.exposed([driver.pid, keeper, listener]) == []
        assert not any(net_exposure.accepts(address, seen["port"])
                       for address in net_exposure.outside_addresses())
        driver.stdin.close()
        assert driver.wait(timeout=30) == 0, driver.stderr.read().decode()
        assert wait_gone([keeper, listener], 10) == []
        assert not os.path.exists(seen["socket_dir"])
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait(timeout=10)
        shutil.rmtree(code, ignore_errors=True)


def test_the_controller_s_sockets_go_where_their_paths_fit(monkeypatch, tmp_path):
    """A Unix socket path holds 107 bytes: under a deep TMPDIR (a test's tmp_path, a
    project's folder) the controller could not bind and exited with 1. Its directory is
    then made in /tmp; the soak test starts a cluster under such a TMPDIR."""
    import tempfile

    from tfmw_notebook.cluster.launch import private_network

    deep = tmp_path / ("d" * 60)
    deep.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    assert private_network._socket_base() == "/tmp"
    monkeypatch.setattr(tempfile, "tempdir", "/tmp")
    assert private_network._socket_base() == "/tmp"
    short = tmp_path.parent / "s"
    short.mkdir(exist_ok=True)
    monkeypatch.setattr(tempfile, "tempdir", str(short))
    assert private_network._socket_base() == str(short)
