"""The simulated-host test infrastructure itself: namespaces, cables, sshd, SSH engines."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections import Counter

import pytest

from sim_hosts import SimHosts, remove_leftovers, sim_hosts_or_skip
from sim_ssh import SshHosts, ensure_openssh, write_ssh_profile

PREFIX = "tfmwt"  # not the default: the sweep tested below touches only this prefix

# Connect from one host to a TCP address; exit 0 if the connection was accepted.
CONNECT = ("import socket, sys\n"
           "socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3]))")
# Accept connections forever on all addresses of the namespace it runs in.
LISTEN = ("import socket, sys\n"
          "s = socket.create_server(('0.0.0.0', int(sys.argv[1])))\n"
          "while True: s.accept()[0].close()\n")
PORT = 47011


def _can_connect(sim: SimHosts, src, address: str, timeout: float = 1.0) -> bool:
    done = sim.run(src, [sys.executable, "-c", CONNECT, address, str(PORT), str(timeout)],
                   timeout=timeout + 20)
    return done.returncode == 0


def _wait_until(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.1)


def _our_leftovers(sim: SimHosts) -> list[str]:
    names = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True,
                           timeout=10).stdout
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                           timeout=10).stdout
    ours = [h.namespace for h in sim.hosts] + [h.veth for h in sim.hosts] + [sim.bridge]
    return [name for name in ours if f" {name}:" in names or f"{name}@" in names
            or name in netns.split()]


@pytest.mark.timeout(90)
def test_two_hosts_names_addresses_reachability_and_cleanup():
    with sim_hosts_or_skip(2, prefix=PREFIX) as sim:
        h1, h2 = sim.hosts
        assert h1.hostname != h2.hostname and h1.address != h2.address
        for host in sim.hosts:
            assert sim.run(host, ["hostname"], check=True).stdout.strip() == host.hostname
            addresses = sim.run(host, ["ip", "-4", "-o", "addr", "show", "dev", "eth0"],
                                check=True).stdout
            assert f"inet {host.address}/24" in addresses
        assert socket.gethostname() not in (h1.hostname, h2.hostname)

        # A listener on each host and one here on the bridge address.
        listeners = [sim.popen(h, [sys.executable, "-c", LISTEN, str(PORT)]) for h in sim.hosts]
        here = socket.create_server((sim.bridge_address, PORT))
        try:
            for src, dst in ((h1, h2), (h2, h1)):
                _wait_until(lambda s=src, d=dst: _can_connect(sim, s, d.address), 20,
                            f"{src.name} reaches {dst.name}")
                assert _can_connect(sim, src, sim.bridge_address)
            assert {p.pid for p in listeners} <= set(sim.pids(h1)) | set(sim.pids(h2))

            sim.link_down(h2)
            assert not _can_connect(sim, h1, h2.address)
            assert not _can_connect(sim, h2, sim.bridge_address)
            assert _can_connect(sim, h1, sim.bridge_address)  # only h2's cable is cut
            sim.link_up(h2)
            _wait_until(lambda: _can_connect(sim, h1, h2.address), 20, "h2 back after link_up")
        finally:
            here.close()
        assert sim.pids(h1) and sim.pids(h2)
    # Left the block: cleanup() ran.
    assert not sim.pids(h1) and not sim.pids(h2)
    assert all(p.poll() is not None for p in listeners)
    assert _our_leftovers(sim) == []


@pytest.mark.timeout(60)
def test_cleanup_after_failure_and_leftovers_of_killed_runs():
    with sim_hosts_or_skip(1, prefix=PREFIX):
        pass  # only for the skip and the leftover sweep
    with pytest.raises(RuntimeError, match="boom"), SimHosts(1, prefix=PREFIX) as sim:
        sleeper = sim.popen(sim.hosts[0], ["sleep", "600"])
        raise RuntimeError("boom")
    assert sleeper.poll() is not None
    assert _our_leftovers(sim) == []

    # A run whose owner died: its bridge names a dead owner, so the sweep removes it all.
    stale = SimHosts(2, prefix=PREFIX).create()
    stale.popen(stale.hosts[0], ["sleep", "600"])
    subprocess.run(["ip", "link", "set", stale.bridge, "alias", "owner 999999999 0"],
                   check=True, timeout=10)
    alive = SimHosts(1, prefix=PREFIX).create()  # a live run is left alone
    try:
        removed = remove_leftovers(PREFIX)
        assert stale.bridge in removed and stale.hosts[0].namespace in removed
        assert _our_leftovers(stale) == []
        assert _our_leftovers(alive) != []
    finally:
        alive.cleanup()
        stale.cleanup()  # idempotent: nothing left to do, must not raise
    assert _our_leftovers(alive) == []


def _engine_pids(sim: SimHosts, host) -> list[int]:
    pids = []
    for pid in sim.pids(host):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"ipyparallel.engine" in f.read():
                    pids.append(pid)
        except OSError:
            pass
    return pids


@pytest.mark.timeout(90)
def test_ssh_engines_on_two_hosts(tmp_path):
    import ipyparallel as ipp

    with sim_hosts_or_skip(2, prefix=PREFIX) as sim:
        reason = ensure_openssh()
        if reason:
            pytest.skip(reason)
        with SshHosts(sim) as ssh:
            profile_dir = str(tmp_path / "profile_simssh")
            write_ssh_profile(profile_dir, {h.address: 2 for h in sim.hosts},
                              sim.bridge_address, ssh.ssh_config_path)
            cluster = ipp.Cluster(profile_dir=profile_dir, cluster_id="simssh",
                                  engine_timeout=45)
            try:
                client = cluster.start_and_connect_sync()
                try:
                    assert len(client.ids) == 4
                    names = client[:].apply_sync(socket.gethostname)
                    assert Counter(names) == {h.hostname: 2 for h in sim.hosts}
                    envs = client[:].apply_sync(os.getenv, "TF_USE_LEGACY_KERAS")
                    assert envs == ["1"] * 4
                    engine_file = os.path.join(profile_dir, "security",
                                               "ipcontroller-simssh-engine.json")
                    with open(engine_file) as f:
                        assert json.load(f)["interface"] == f"tcp://{sim.bridge_address}"
                    for host in sim.hosts:
                        assert len(_engine_pids(sim, host)) >= 2
                finally:
                    client.close()
            finally:
                cluster.stop_cluster_sync()
            for host in sim.hosts:
                _wait_until(lambda h=host: not _engine_pids(sim, h), 20,
                            f"engines on {host.name} stopped")
        # SshHosts.stop(): no sshd or session is left; SimHosts.cleanup() follows.
        assert not sim.pids(sim.hosts[0]) and not sim.pids(sim.hosts[1])
    assert _our_leftovers(sim) == []
