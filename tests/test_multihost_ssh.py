"""Clusters across hosts started by ipyparallel's SSH engine launcher, used exactly as
docs/several-machines.md's SSH recipe says: a real OpenSSH server in each of two simulated hosts
(tests/sim_ssh.py), the recipe's `ipcluster start` in a shell on this machine with the
recipe's `ipcluster_config.py` lines, and the recipe's attach line in the notebook, all
taken from that page (tests/doc_recipes.py), so the recipe and the test cannot drift
apart. Restarts go through that launcher.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from doc_recipes import recipe
from kernel_session import kernel_with_extension
from sim_hosts import sim_hosts_or_skip
from sim_ssh import SeparateFiles, SshHosts, ensure_openssh
from test_multihost import FIT_WITH_MARKER, QUICK_FIT, REDUCE, host_pids, status, wait_for

pytestmark = pytest.mark.timeout(300)

# What this machine changes in the recipe: the simulated hosts stand for node1 and node2
# (2 engines each, as in the recipe: 4 workers on 2 cores), and this virtualenv's Python,
# which the hosts see at the same path, is the hosts' Python.
SIZES = {'"node1"': '"simhost1"', '"node2"': '"simhost2"',
         '"/opt/venv/bin/python"': json.dumps(sys.executable)}
RECIPE = recipe("SSH").sized(SIZES)
(START,) = RECIPE.commands
(ATTACH,) = RECIPE.notebook
PROFILE = START.split("--profile=")[1].split()[0]
EARLY_SHUTDOWN_SECONDS = 5   # ipcluster's default is 30


def simulation_only(ssh: SshHosts) -> list[str]:
    """The `ipcluster_config.py` lines the simulated hosts need and a real cluster would not.

    A shorter early-shutdown window (see wait_past_early_shutdown) stands for a user's
    cluster that has been up longer than ipcluster's 30 s when a worker fails.

    `-F` names the ssh config of tests/sim_ssh.py, which stands in for the user's
    ~/.ssh/config: the user (root), the key, the host names' test addresses, no prompt
    for the hosts' throwaway keys, keepalives (a cut cable ends a session), one shared
    connection per host. Everything else a real cluster has, SeparateFiles gives the
    hosts outside the config: DNS names, and a profile directory of their own."""
    return [f"c.SSHEngineSetLauncher.ssh_args = {['-F', ssh.ssh_config_path]!r}",
            f"c.SSHEngineSetLauncher.scp_args = {['-F', ssh.ssh_config_path]!r}",
            f"c.IPClusterStart.early_shutdown = {EARLY_SHUTDOWN_SECONDS}"]


def shell_env() -> dict[str, str]:
    """A user's shell on this machine: this virtualenv active."""
    return dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep +
                os.environ.get("PATH", ""))


class SshCluster:
    """The recipe's `ipcluster start` with its profile's `ipcluster_config.py`, as a user
    runs it in a terminal."""

    def __init__(self, ssh: SshHosts, profile_dir: str, workdir: str, recipe=RECIPE):
        self.profile_dir = profile_dir
        self.config = os.path.join(profile_dir, "ipcluster_config.py")
        assert not os.path.exists(self.config), "another test left an ssh profile config"
        with open(self.config, "w") as f:
            f.write("c = get_config()  # noqa: F821\n" +
                    "\n".join(recipe.config + simulation_only(ssh)) + "\n")
        self.log = os.path.join(workdir, "ipcluster.log")
        self.process: subprocess.Popen | None = None
        try:
            with open(self.log, "ab") as log:
                (start,) = recipe.commands
                self.process = subprocess.Popen(
                    ["sh", "-c", start], cwd=workdir, stdin=subprocess.DEVNULL, stdout=log,
                    stderr=log, env=shell_env(), start_new_session=True)
            cluster_files = os.path.join(profile_dir, "security", "cluster-*.json")
            wait_for(lambda: glob.glob(cluster_files) or self.process.poll() is not None, 60,
                     "ipcluster's cluster file")
            assert self.process.poll() is None, open(self.log).read()[-3000:]
        except BaseException:
            self.stop()
            raise

    def wait_past_early_shutdown(self) -> None:
        """`ipcluster start` tears the whole cluster down when its engines stop within
        IPClusterStart.early_shutdown of their start ("they probably failed to connect");
        a user's cluster is older than that when a worker fails. ipcluster logs the
        window's end."""
        def logged():
            with open(self.log, errors="replace") as f:
                return "Engines appear to have started successfully" in f.read()

        wait_for(logged, EARLY_SHUTDOWN_SECONDS + 60, "ipcluster's early-shutdown window to pass")

    def stop(self) -> None:
        """Stop the cluster and remove the config this test wrote."""
        try:
            if self.process is not None:
                subprocess.run([sys.executable, "-m", "ipyparallel.cluster", "stop",
                                f"--profile-dir={self.profile_dir}"],
                               capture_output=True, timeout=90)
                try:
                    self.process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(self.process.pid, 9)
                    self.process.wait(timeout=10)
        finally:
            os.remove(self.config)


@pytest.fixture(scope="module")
def sim():
    with sim_hosts_or_skip(2) as hosts:
        assert [f'"{h.hostname}"' for h in hosts.hosts] == [SIZES['"node1"'], SIZES['"node2"']]
        yield hosts


@pytest.fixture(scope="module")
def profile_dir(ipython_dir):
    return os.path.join(ipython_dir, f"profile_{PROFILE}")


@contextlib.contextmanager
def ssh_servers(sim, profile_dir: str):
    """An sshd on each simulated host (skips where OpenSSH cannot be had)."""
    reason = ensure_openssh()
    if reason:
        pytest.skip(reason)
    # Each host resolves this machine's host name (the recipe's --location) and has a
    # profile directory of its own at the profile's path, as separate machines would:
    # the launcher copies the connection files there (onto the very same file if the
    # hosts shared this machine's profile directory).
    hosts = SeparateFiles(sim, private=(profile_dir,))
    try:
        with SshHosts(hosts) as servers:
            yield servers
    finally:
        hosts.remove()


@pytest.fixture(scope="module")
def ssh(sim, profile_dir):
    with ssh_servers(sim, profile_dir) as servers:
        yield servers


@pytest.fixture(scope="module")
def ipcluster(ssh, profile_dir, tmp_path_factory):
    cluster = SshCluster(ssh, profile_dir, str(tmp_path_factory.mktemp("ssh-login")))
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


def cut_once_training(sim, host, marker: str) -> threading.Thread:
    """Cut `host`'s link once the fit wrote `marker` (FIT_WITH_MARKER), from a thread."""
    def cut_when_training():
        wait_for(lambda: os.path.exists(marker), 120, "training")
        sim.link_down(host)

    cutter = threading.Thread(target=cut_when_training)
    cutter.start()
    return cutter


def fit_cut_off_midway(kernel, sim, host, *, rank: int, min_workers: int, tmp_path):
    """A floor of `min_workers` (`cluster.min_workers`, as `--min-workers` sets it), then a
    fit under `--max-restarts 1` during which `host` is cut off once worker `rank` is
    training. The link stays down: the caller brings it back. Returns the cell's output."""
    kernel.ok("from tfmw_notebook.magics.session import active_cluster\n"
              f"active_cluster().min_workers = {min_workers}")
    kernel.ok("%%tfdist\n" + QUICK_FIT)
    marker = str(tmp_path / "cut")
    code = FIT_WITH_MARKER.format(rank=rank, marker=marker, epochs=6, action="pass")
    cutter = cut_once_training(sim, host, marker)
    out = kernel.execute("%%tfdist --max-restarts 1\n" + code, timeout=240)
    cutter.join(timeout=30)
    return out


def test_ssh_launcher_cluster_trains_across_two_hosts(sim, kernel, ipcluster):
    began = time.monotonic()
    out = kernel.ok(ATTACH, timeout=180)
    assert "4 workers ready" in out.stdout, out.stdout
    # The recipe's controller listens on every interface and names this machine's host
    # name as the place to dial (which the hosts resolve, as the recipe says they must).
    with open(os.path.join(ipcluster.profile_dir, "security", "ipcontroller-engine.json")) as f:
        told = json.load(f)
    assert (told["interface"], told["location"]) == ("tcp://0.0.0.0", socket.gethostname())
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
    # A backup every 4 steps: the kill (at the 6th) comes after one, so there is one to resume
    # from (with the default, every epoch, there was none yet and the fit starts over).
    out = kernel.execute("%%tfdist --max-restarts 1 --backup-every 4\n" + code, timeout=240)
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
    cutter = cut_once_training(sim, cut, marker)
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


def test_min_workers_goes_on_with_the_host_left_and_resize_grows_back(sim, kernel, ipcluster,
                                                                    tmp_path):
    """A floor of 2 of the 4 workers (`cluster.min_workers`, as `--min-workers 2` sets it);
    host 2 cut mid-fit: the cell completes on host 1's 2 workers (restarted on the host
    left, state replayed, `--max-restarts` runs the cell again, its fit resuming from the
    BackupAndRestore backup); the run record notes it; `resize -n 4` grows back."""
    ipcluster.wait_past_early_shutdown()
    cut = sim.hosts[1]
    try:
        began = time.monotonic()
        out = fit_cut_off_midway(kernel, sim, cut, rank=2, min_workers=2, tmp_path=tmp_path)
        print(f"SSH launcher: went on with the host left, the cell took "
              f"{time.monotonic() - began:.1f} s")
        assert out.status == "ok", out.stderr[-3000:]
        assert "going on with the 2 workers of the hosts left" in out.stderr, out.stderr
        rows = status(kernel)
        assert len(rows) == 2 and {row["host"] for row in rows} == {sim.hosts[0].hostname}
        # The fit's run record: it ended on the host left, 2 workers of the 4 it began on.
        out = kernel.ok("import json\nfrom tfmw_notebook import list_runs\n"
                        "print(json.dumps(list_runs().records()[-1]['cluster']))")
        noted = json.loads(out.stdout.strip().splitlines()[-1])
        assert (noted["workers"], noted["resized_from"], noted["hosts"]) == (
            2, 4, [sim.hosts[0].hostname]), noted
    finally:
        sim.link_up(cut)
    began = time.monotonic()
    out = kernel.ok("%tfdist resize -n 4", timeout=240)
    print(f"SSH launcher: resize -n 4 once the host was back {time.monotonic() - began:.1f} s")
    assert sorted({row["host"] for row in status(kernel)}) == sorted(h.hostname
                                                                    for h in sim.hosts)
    assert kernel.ok(REDUCE, timeout=60).results[-1]["text/plain"] == "4.0"


# In the kernel: the pids of the registered spares once each has imported TensorFlow.
WARM_SPARES = '''
import json as _json, time as _time
from tfmw_notebook.magics.session import active_cluster as _cluster
_group = _cluster()._group
_deadline = _time.monotonic() + 150
while True:
    _spares = _group.standby.spares(_group.registered(), _group._taken())
    _states = _group.client[_spares].apply_sync(eval, "('tensorflow' in __import__('sys')"
        ".modules and not any(t.name == 'tfmw-preimport' for t in __import__('threading')"
        ".enumerate()), __import__('os').getpid())") if _spares else []
    # Every spare of the pool (`--standby K`) registered and warm: a pool refilled in a
    # new job registers one engine at a time.
    if len(_states) >= _group.standby.size and all(_done for _done, _ in _states):
        break
    assert _time.monotonic() < _deadline, f"{len(_spares)} spares, not all warm: {_states}"
    _time.sleep(0.5)
print(_json.dumps(sorted(_pid for _, _pid in _states)))
'''


def test_a_spare_comes_through_the_ssh_launcher_and_a_resize_takes_it(sim, kernel):
    """`attach --standby`: a spare launched by the SSH launcher on a host (the profile's
    ssh options, our environment and startup command passed through ssh) imports
    TensorFlow there; a resize to one worker makes it that worker."""
    kernel.ok("%tfdist stop", timeout=120)
    out = kernel.ok(ATTACH + " --standby 1", timeout=180)   # the same 4 workers again
    assert "1 spare engines start in the background through the cluster's launcher" \
        in out.stdout, out.stdout
    spares = json.loads(kernel.ok(WARM_SPARES, timeout=200).stdout.strip().splitlines()[-1])
    assert set(spares) <= engine_pids(sim)   # on a simulated host, through ssh
    out = kernel.ok("%tfdist resize -n 1", timeout=180)
    assert [row["pid"] for row in status(kernel)] == spares, out.stdout
    assert kernel.ok("%%tfdist\nint(tfdist.world_size)").results[-1]["text/plain"] == "1"
    print(f"SSH launcher, standby 1: {out.stdout.strip()}")
