"""Clusters across hosts started by ipyparallel's SSH engine launcher: a real OpenSSH
server in each of two simulated hosts, `ipcluster start` on this host, `%tfdist attach
--profile P --cluster-id ID`. Restarts go through that launcher.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from kernel_session import kernel_with_extension
from sim_hosts import sim_hosts_or_skip
from sim_ssh import SshHosts, ensure_openssh, write_ssh_profile
from test_multihost import FIT_WITH_MARKER, QUICK_FIT, REDUCE, host_pids, status, wait_for

pytestmark = pytest.mark.timeout(300)

PROFILE = "tfmwssh"
CLUSTER_ID = "sim"


class SshCluster:
    """`ipcluster start` with the SSH engine launcher, as a user runs it in a terminal."""

    def __init__(self, sim, ssh, ipython_dir: str):
        self.profile_dir = os.path.join(ipython_dir, f"profile_{PROFILE}")
        write_ssh_profile(self.profile_dir, {h.address: 2 for h in sim.hosts},
                          sim.bridge_address, ssh.ssh_config_path)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "ipyparallel.cluster", "start",
             f"--profile-dir={self.profile_dir}", f"--cluster-id={CLUSTER_ID}",
             "--daemonize=False", "--log-level=ERROR"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        cluster_file = os.path.join(self.profile_dir, "security", f"cluster-{CLUSTER_ID}.json")
        wait_for(lambda: os.path.exists(cluster_file), 60, "ipcluster's cluster file")
        self.engines_up = time.monotonic()   # set again once all engines registered

    def wait_past_early_shutdown(self) -> None:
        """`ipcluster start` tears the whole cluster down when its engines stop within
        30 s of their start (IPClusterStart.early_shutdown: "they probably failed to
        connect"); a user's cluster is older than that when a worker fails."""
        time.sleep(max(0.0, self.engines_up + 31 - time.monotonic()))

    def stop(self) -> None:
        subprocess.run([sys.executable, "-m", "ipyparallel.cluster", "stop",
                        f"--profile-dir={self.profile_dir}", f"--cluster-id={CLUSTER_ID}"],
                       capture_output=True, timeout=90)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, 9)
            self.process.wait(timeout=10)


@pytest.fixture(scope="module")
def sim():
    with sim_hosts_or_skip(2) as hosts:
        yield hosts


@pytest.fixture(scope="module")
def ssh(sim):
    reason = ensure_openssh()
    if reason:
        pytest.skip(reason)
    with SshHosts(sim) as servers:
        yield servers


@pytest.fixture(scope="module")
def ipcluster(sim, ssh, ipython_dir):
    cluster = SshCluster(sim, ssh, ipython_dir)
    yield cluster
    cluster.stop()


@pytest.fixture(scope="module")
def kernel(tmp_path_factory, ipcluster):
    with kernel_with_extension(str(tmp_path_factory.mktemp("ssh-kernel"))) as session:
        yield session


def engine_pids(sim) -> set[int]:
    """Processes on the hosts other than the ssh servers and their sessions."""
    found = set()
    for pids in host_pids(sim).values():
        for pid in pids:
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    command = f.read().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if "ipyparallel" in command and "sshd" not in command:
                found.add(pid)
    return found


def test_ssh_launcher_cluster_trains_across_two_hosts(sim, kernel, ipcluster):
    began = time.monotonic()
    out = kernel.ok(f"%tfdist attach --profile {PROFILE} --cluster-id {CLUSTER_ID} -n 4",
                    timeout=180)
    assert "4 workers ready" in out.stdout, out.stdout
    ipcluster.engines_up = time.monotonic()
    print(f"SSH launcher: attach {time.monotonic() - began:.1f} s")
    kernel.ok("%%tfdist\n" + QUICK_FIT)
    out = kernel.ok("%%tfdist\nhistory = model.fit(dataset, epochs=2, steps_per_epoch=10, "
                    "verbose=0)\nhistory.history['loss'][-1] < history.history['loss'][0]",
                    timeout=120)
    assert out.results[-1]["text/plain"] == "True"
    rows = status(kernel)
    assert sorted({row["host"] for row in rows}) == sorted(h.hostname for h in sim.hosts)
    assert {row["address"].rsplit(":", 1)[0] for row in rows} == {h.address for h in sim.hosts}


def test_max_restarts_survives_a_killed_remote_engine_through_the_launcher(sim, kernel,
                                                                          ipcluster, tmp_path):
    ipcluster.wait_past_early_shutdown()
    old = engine_pids(sim)
    marker = str(tmp_path / "killed")
    code = FIT_WITH_MARKER.format(rank=2, marker=marker, epochs=3,
                                  action="os.kill(os.getpid(), signal.SIGKILL)")
    began = time.monotonic()
    out = kernel.execute("%%tfdist --max-restarts 1\n" + code, timeout=240)
    took = time.monotonic() - began

    assert out.status == "ok", out.error_text + out.stderr
    assert "restart 1 of 1 after: worker 2" in out.stderr, out.stderr
    assert "restored" in out.stdout   # the earlier cells came back without training
    assert "resum" in out.stdout + out.stderr   # the fit went on from its backup
    rows = status(kernel)
    assert all(row["alive"] for row in rows)
    assert not {row["pid"] for row in rows} & old           # new engines, via the launcher
    assert sorted({row["host"] for row in rows}) == sorted(h.hostname for h in sim.hosts)
    wait_for(lambda: not engine_pids(sim) & old, 15, "the old engines to be gone")
    print(f"SSH launcher: --max-restarts cell with a killed remote engine {took:.1f} s")


def test_a_host_cut_off_mid_fit_ends_the_cell_and_restart_brings_the_cluster_back(
        sim, kernel, tmp_path):
    old = engine_pids(sim)
    rows = status(kernel)
    cut = sim.hosts[1]
    assert rows[2]["host"] == cut.hostname
    marker = str(tmp_path / "cut")
    code = FIT_WITH_MARKER.format(rank=2, marker=marker, epochs=200, action="pass")
    kernel.ok("%%tfdist\n" + QUICK_FIT)

    import threading

    def cut_when_training():
        wait_for(lambda: os.path.exists(marker), 120, "training")
        sim.link_down(cut)

    cutter = threading.Thread(target=cut_when_training)
    cutter.start()
    out = kernel.execute("%%tfdist --no-checkpoint\n" + code, timeout=120)
    cutter.join(timeout=30)
    cut_at = float(open(marker).read())
    ended = time.time()
    try:
        assert out.status == "error", out.stdout
        message = out.error["evalue"]
        assert f"on {cut.hostname}" in message and "not heard from" in message, message
        assert "%tfdist restart" in message
        assert ended - cut_at <= 30.0, ended - cut_at
        print(f"SSH launcher: link cut -> cell ended {ended - cut_at:.1f} s")
    finally:
        sim.link_up(cut)

    out = kernel.ok("%tfdist restart", timeout=180)
    assert kernel.ok(REDUCE, timeout=60).results[-1]["text/plain"] == "4.0"
    # No worker of the old cluster is left on either host (the cut-off ones ended
    # themselves when they could not reach the controller).
    wait_for(lambda: not engine_pids(sim) & old, 30, "the old engines to be gone")
    assert sorted({row["host"] for row in status(kernel)}) == sorted(h.hostname
                                                                    for h in sim.hosts)
