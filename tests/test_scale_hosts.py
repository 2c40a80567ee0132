"""Sixteen workers on eight simulated hosts, through docs/several-machines.md's SSH recipe
sized to 8 nodes of 2 engines: attached, they train in step; a killed remote worker under
`--max-restarts 1` brings all 16 back through the launcher with their state, and the fit
completes.

Marked `scale` and skipped unless asked for: `python -m pytest -m scale`.
"""

from __future__ import annotations

import json
import os
import sys
import time

import pytest

from doc_recipes import recipe
from kernel_session import kernel_with_extension, per_worker
from sim_hosts import sim_hosts_or_skip
from test_multihost import status, wait_for
from test_multihost_ssh import PROFILE, SshCluster, engine_pids, ssh_servers
from test_scale import FIT, KILL_ONCE_AT_EPOCH_2

pytestmark = [pytest.mark.scale, pytest.mark.timeout(900)]

HOSTS, PER_HOST = 8, 2
N = HOSTS * PER_HOST
# The recipe's two nodes of 2 engines become 8 (simhost1..8), this virtualenv's Python the
# hosts' Python: the replacements are the only difference from the page.
NODES = {f"simhost{i}": PER_HOST for i in range(1, HOSTS + 1)}
RECIPE = recipe("SSH").sized({'{"node1": 2, "node2": 2}': json.dumps(NODES),
                              "c.Cluster.n = 4": f"c.Cluster.n = {N}",
                              "-n 4": f"-n {N}",
                              '"/opt/venv/bin/python"': json.dumps(sys.executable)})
(ATTACH,) = RECIPE.notebook


@pytest.fixture(scope="module")
def sim():
    with sim_hosts_or_skip(HOSTS) as hosts:
        yield hosts


@pytest.fixture(scope="module")
def profile_dir(ipython_dir):
    return os.path.join(ipython_dir, f"profile_{PROFILE}")


@pytest.fixture(scope="module")
def ssh(sim, profile_dir):
    with ssh_servers(sim, profile_dir) as servers:
        yield servers


@pytest.fixture(scope="module")
def ipcluster(ssh, profile_dir, tmp_path_factory):
    cluster = SshCluster(ssh, profile_dir, str(tmp_path_factory.mktemp("ssh-login")), RECIPE)
    yield cluster
    cluster.stop()


@pytest.fixture(scope="module")
def kernel(tmp_path_factory, ipcluster):
    with kernel_with_extension(str(tmp_path_factory.mktemp("scale-hosts-kernel"))) as session:
        yield session


def test_sixteen_workers_on_eight_hosts_attach_and_train_in_step(sim, kernel):
    began = time.monotonic()
    out = kernel.ok(ATTACH, timeout=600)
    assert f"{N} workers ready" in out.stdout, out.stdout
    print(f"8 hosts: attach {time.monotonic() - began:.1f} s")
    rows = status(kernel)
    hosts = [row["host"] for row in rows]
    assert sorted(set(hosts)) == sorted(h.hostname for h in sim.hosts)
    assert all(hosts.count(h.hostname) == PER_HOST for h in sim.hosts), hosts
    kernel.ok("%%tfdist\n" + FIT.format(epochs=2, callback=""), timeout=600)
    digests = per_worker(kernel, "digest")
    assert len(digests) == N and len(set(digests)) == 1, digests


def test_a_killed_remote_worker_restarts_all_sixteen_through_the_launcher(
        sim, kernel, ipcluster, tmp_path):
    ipcluster.wait_past_early_shutdown()
    kernel.ok("%%tfdist\nkept = tfdist.rank + 100")
    old = engine_pids(sim)
    kill = KILL_ONCE_AT_EPOCH_2.format(marker=str(tmp_path / "killed"))
    began = time.monotonic()
    out = kernel.execute("%%tfdist --max-restarts 1\n" + kill + FIT.format(
        epochs=4, callback="KillOnceAtEpoch2()"), timeout=800)
    took = time.monotonic() - began
    assert out.status == "ok", out.error_text + out.stderr
    assert "restart 1 of 1 after: worker 9" in out.stderr, out.stderr
    assert "resum" in out.stdout + out.stderr        # from the backup, not from the start
    rows = status(kernel)
    assert len(rows) == N and all(row["alive"] for row in rows)
    assert not {row["pid"] for row in rows} & old    # new engines, via the launcher
    assert sorted({row["host"] for row in rows}) == sorted(h.hostname for h in sim.hosts)
    assert per_worker(kernel, "kept") == [rank + 100 for rank in range(N)]
    assert len(set(per_worker(kernel, "digest"))) == 1
    wait_for(lambda: not engine_pids(sim) & old, 60, "the old engines to be gone")
    print(f"8 hosts: --max-restarts cell with a killed remote worker {took:.1f} s")
