"""Attaching to an ipyparallel cluster someone else started with `ipcluster start`.

Real `ipcluster` processes in the background (same IPYTHONDIR as the tests),
real engines, real TensorFlow. Attached clusters keep their processes when we
stop: only `ipcluster stop` ends them.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid

import psutil
import pytest
from tfmw_notebook import ClusterSetupError, TFCluster
from tfmw_notebook.errors import BadArgument

pytestmark = pytest.mark.timeout(240)

_IPCLUSTER = os.path.join(os.path.dirname(sys.executable), "ipcluster")


def _ipcluster_command() -> list[str]:
    if os.path.exists(_IPCLUSTER):
        return [_IPCLUSTER]
    return [sys.executable, "-m", "ipyparallel.cluster"]


def _wait_until(condition, timeout: float, what: str, poll: float = 0.1):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g} s waiting for "
                        f"{what() if callable(what) else what}")
        time.sleep(poll)


def _describe(procs) -> list[str]:
    described = []
    for proc in procs:
        try:
            described.append(f"{proc.pid} {' '.join(proc.cmdline())}")
        except psutil.Error:
            described.append(f"{proc.pid} (gone)")
    return described


class ExternalCluster:
    """`ipcluster start -n N --profile P --cluster-id ID`, run in the background."""

    def __init__(self, ipython_dir: str, log_dir, n: int = 2, extra: tuple[str, ...] = ()):
        tag = uuid.uuid4().hex[:8]
        self.n = n
        self.profile = f"tfmw-attach-{tag}"
        self.cluster_id = f"cid{tag}"
        self.profile_dir = os.path.join(ipython_dir, f"profile_{self.profile}")
        security = os.path.join(self.profile_dir, "security")
        self.cluster_file = os.path.join(security, f"cluster-{self.cluster_id}.json")
        self.url_file = os.path.join(security, f"ipcontroller-{self.cluster_id}-client.json")
        self.log_path = os.path.join(str(log_dir), f"ipcluster-{tag}.log")
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            _ipcluster_command() + ["start", "-n", str(n), "--profile", self.profile,
                                    "--cluster-id", self.cluster_id, *extra],
            env=dict(os.environ), stdout=self._log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )
        self._seen: dict[int, psutil.Process] = {}

    def log(self) -> str:
        with open(self.log_path) as f:
            return f.read()[-4000:]

    def wait_ready(self, timeout: float = 90.0) -> None:
        """Until the cluster file lists the engine set and the client file exists."""

        def ready():
            if self.proc.poll() is not None:
                pytest.fail(f"ipcluster exited early ({self.proc.returncode}):\n{self.log()}")
            try:
                with open(self.cluster_file) as f:
                    info = json.load(f)
            except (FileNotFoundError, json.JSONDecodeError):
                return False
            return bool(info.get("engines", {}).get("sets")) and os.path.exists(self.url_file)

        _wait_until(ready, timeout, lambda: f"ipcluster to come up; log:\n{self.log()}")

    def processes(self) -> list[psutil.Process]:
        """ipcluster and every descendant (controller, engines, nannies); remembered."""
        try:
            root = psutil.Process(self.proc.pid)
            found = [root] + root.children(recursive=True)
        except psutil.NoSuchProcess:
            found = []
        for proc in found:
            self._seen.setdefault(proc.pid, proc)
        return found

    def alive(self) -> bool:
        return self.proc.poll() is None

    def request_stop(self) -> subprocess.Popen:
        """`ipcluster stop` for this cluster, in the background; see check_stopped."""
        procs = self.processes()
        assert len(procs) >= 1 + 1 + self.n, procs  # ipcluster, controller, engines
        return subprocess.Popen(
            _ipcluster_command() + ["stop", "--profile", self.profile,
                                    "--cluster-id", self.cluster_id],
            env=dict(os.environ), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )

    def check_stopped(self, stopper: subprocess.Popen, deadline: float) -> None:
        """The stop command succeeded and every process ipcluster had ended in time."""
        output, _ = stopper.communicate(timeout=max(1.0, deadline - time.monotonic()))
        assert stopper.returncode == 0, output
        _, alive = psutil.wait_procs(list(self._seen.values()),
                                     timeout=max(0.0, deadline - time.monotonic()))
        assert not alive, f"still running after `ipcluster stop`: {_describe(alive)}"
        assert self.proc.wait(timeout=max(1.0, deadline - time.monotonic())) is not None

    def kill(self) -> None:
        """Teardown: end whatever of ours is still running, by pid."""
        self.processes()
        for proc in self._seen.values():
            try:
                proc.send_signal(signal.SIGKILL)
            except psutil.Error:
                pass
        psutil.wait_procs(list(self._seen.values()), timeout=10)
        if self.proc.poll() is None:
            self.proc.wait(timeout=10)
        self._log.close()


_USES = ("api", "profile", "url_file")  # one external cluster per way of attaching


@pytest.fixture(scope="module")
def externals(ipython_dir, tmp_path_factory):
    """Three `ipcluster start -n 2` started together, one per way of attaching, so each
    test meets engines in a known state. The last test stops them with `ipcluster stop`;
    teardown kills whatever is left."""
    log_dir = tmp_path_factory.mktemp("ipcluster-logs")
    started = {}
    try:
        for use in _USES:
            started[use] = ExternalCluster(ipython_dir, log_dir, n=2)
        for cluster in started.values():
            cluster.wait_ready()
        yield started
    finally:
        for cluster in started.values():
            cluster.kill()


@pytest.fixture(scope="module")
def kernel():
    from kernel_session import KernelSession

    session = KernelSession()
    try:
        session.ok("%load_ext tfmw_notebook", timeout=60)
        yield session
    finally:
        try:
            session.execute("from tfmw_notebook.magics.session import stop_active_cluster\n"
                            "stop_active_cluster()",
                            timeout=60)
        finally:
            session.shutdown()


def _pids_of(procs) -> set[int]:
    return {p.pid for p in procs}


# The cells: TF_CONFIG and the context on each worker, and one collective.
_WHO = ("import os, json\n"
        "cfg = json.loads(os.environ['TF_CONFIG'])\n"
        "who = [tfdist.rank, tfdist.world_size, tfdist.is_chief, cfg['task']['index'],\n"
        "       len(cfg['cluster']['worker']), os.getpid()]\n")
_REDUCE = ("per_replica = strategy.run(lambda: tf.constant(float(tfdist.rank + 1)))\n"
           "total = float(strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None))\n"
           "total\n")


def test_api_attach_runs_on_external_engines_and_leaves_them_running(externals):
    external = externals["api"]
    cluster = TFCluster.attach(profile=external.profile, cluster_id=external.cluster_id,
                               n=2, timeout=90)
    try:
        assert cluster.size == 2
        engine_pids = [w.pid for w in cluster.workers]
        assert set(engine_pids) <= _pids_of(external.processes())  # ipcluster's engines

        cluster.run(_WHO)
        who = [cluster.pull(["who"], rank=r)["who"] for r in range(2)]
        assert [w[:5] for w in who] == [[0, 2, True, 0, 2], [1, 2, False, 1, 2]]
        assert [w[5] for w in who] == engine_pids

        result = cluster.run(_REDUCE)
        assert result.display["data"]["text/plain"] == "3.0"  # 1 + 2 across the workers
        assert [cluster.pull(["total"], rank=r)["total"] for r in range(2)] == [3.0, 3.0]
        before = external.processes()
    finally:
        cluster.stop()

    # Attached: our stop ends none of ipcluster's processes.
    assert cluster.workers == []
    time.sleep(1.0)
    assert external.alive()
    assert all(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in before)
    assert _pids_of(external.processes()) >= set(engine_pids)


def test_attach_again_reuses_the_warm_workers(externals):
    """Engines that served an earlier attach keep their strategy; a new attach reuses it."""
    external = externals["api"]
    first = TFCluster.attach(profile=external.profile, cluster_id=external.cluster_id,
                             n=2, timeout=90)
    layout = [(w.engine_id, w.endpoint, w.pid) for w in first.workers]
    first.run("kept = 'from the first attach'")
    first.stop()

    again = TFCluster.attach(profile=external.profile, cluster_id=external.cluster_id,
                             n=2, timeout=90)
    try:
        assert [(w.engine_id, w.endpoint, w.pid) for w in again.workers] == layout
        assert again.run(_REDUCE).display["data"]["text/plain"] == "3.0"
        assert again.pull(["kept"], rank=1)["kept"] == "from the first attach"
    finally:
        again.stop()


def _status_rows(text: str) -> list[list[str]]:
    lines = text.strip().splitlines()
    assert lines[0].split()[:2] == ["rank", "host"], text
    return [line.split() for line in lines[1:]]


def _check_magic_cluster(kernel, external, attach_line: str) -> None:
    out = kernel.ok(attach_line, timeout=150)
    assert "2 workers ready" in out.stdout, out.stdout

    kernel.ok("%%tfdist\n" + _WHO)
    out = kernel.ok("%%tfdist\n" + _REDUCE, timeout=60)
    assert out.results[-1]["text/plain"] == "3.0"
    out = kernel.ok("import json\nfrom tfmw_notebook.magics.session import active_cluster\n"
                    "print(json.dumps([active_cluster().pull(['who'], rank=r)['who'] "
                    "for r in range(2)]))")
    who = json.loads(out.stdout.strip().splitlines()[-1])
    assert [w[:5] for w in who] == [[0, 2, True, 0, 2], [1, 2, False, 1, 2]]

    rows = _status_rows(kernel.ok("%tfdist status").stdout)
    # rank, host, local rank, address, pid, alive, running
    assert [row[0] for row in rows] == ["0", "1"]
    assert [row[2] for row in rows] == ["0", "1"]   # both workers on this host
    assert all(row[5] == "yes" for row in rows)
    pids = [int(row[4]) for row in rows]
    assert pids == [w[5] for w in who]
    assert set(pids) <= _pids_of(external.processes())

    out = kernel.ok("%tfdist stop", timeout=60)
    assert "let go of 2 workers; the attached cluster keeps running" in out.stdout
    time.sleep(1.0)
    assert external.alive()
    assert set(pids) <= _pids_of(external.processes())
    out = kernel.ok("print(active_cluster() is None)")
    assert out.stdout.strip() == "True"


def test_magic_attach_by_profile_and_cluster_id(kernel, externals):
    external = externals["profile"]
    _check_magic_cluster(kernel, external, f"%tfdist attach --profile {external.profile} "
                                           f"--cluster-id {external.cluster_id} -n 2")


def test_magic_attach_by_url_file(kernel, externals):
    external = externals["url_file"]
    _check_magic_cluster(kernel, external, f"%tfdist attach --url-file {external.url_file} -n 2")


def test_ipcluster_stop_ends_every_process(externals, tmp_path):
    """After our stops, the clusters still run; `ipcluster stop` ends every process."""
    saved = {}
    for use, external in externals.items():
        assert external.alive(), f"{use}: ipcluster ended early:\n{external.log()}"
        saved[use] = str(tmp_path / f"{use}-client.json")
        shutil.copy(external.url_file, saved[use])
    # Stop all three at once: TF workers ignore SIGTERM, so each stop takes ~10 s.
    stoppers = {use: external.request_stop() for use, external in externals.items()}
    deadline = time.monotonic() + 60
    for use, external in externals.items():
        external.check_stopped(stoppers[use], deadline)

    # Gone: attaching again says so, quickly, by name or by a stale connection file.
    external = externals["api"]
    with pytest.raises(ClusterSetupError, match="no running ipyparallel cluster found"):
        TFCluster.attach(profile=external.profile, cluster_id=external.cluster_id, timeout=5)
    began = time.monotonic()
    with pytest.raises(ClusterSetupError, match="no ipyparallel controller answered"):
        TFCluster.attach(url_file=saved["api"], timeout=3)
    assert time.monotonic() - began < 15


# On an engine: (TensorFlow imported and its start-up import thread done, pid).
_SPARE_STATE = ("('tensorflow' in __import__('sys').modules and not any(t.name == "
                "'tfmw-preimport' for t in __import__('threading').enumerate()), "
                "__import__('os').getpid())")


def _warm_spares(group) -> list[int] | None:
    """The pids of the group's registered spares once each has TensorFlow imported (its
    start-up import thread done); None before."""
    spares = group.standby.spares(group.registered(), group._taken())
    if not spares:
        return None
    states = group.client[spares].apply_sync(eval, _SPARE_STATE)
    return sorted(pid for _, pid in states) if all(done for done, _ in states) else None


def _engines_we_launched() -> list[psutil.Process]:
    found = []
    for process in psutil.Process().children(recursive=True):
        try:
            if "ipyparallel.engine" in " ".join(process.cmdline()):
                found.append(process)
        except psutil.Error:   # ended meanwhile, or a zombie
            pass
    return found


def test_standby_on_attach_launches_warm_spares_through_the_clusters_launcher(
        ipython_dir, tmp_path):
    """`TFCluster.attach(..., standby=1)` on `ipcluster start -n 1`: a spare comes through
    the cluster's own launcher and imports TensorFlow; the restart makes it the worker and
    another spare follows; letting go of the cluster ends the idle spare only."""
    # ipcluster ends the whole cluster when its engines stop within `early_shutdown` s of
    # their start (30 by default); a user's cluster is older than that when it restarts.
    external = ExternalCluster(ipython_dir, tmp_path, n=1,
                               extra=("--IPClusterStart.early_shutdown=2",))
    try:
        external.wait_ready()
        _wait_until(lambda: "appear to have started successfully" in external.log(), 60,
                    "ipcluster's early-shutdown window to pass")
        # By connection file: no launcher is known, so spares are refused, nothing started.
        with pytest.raises(BadArgument, match=r"^`standby` needs the attached cluster's "
                                              r"launcher.*: attach by profile"):
            TFCluster.attach(url_file=external.url_file, n=1, timeout=30, standby=1)
        cluster = TFCluster.attach(profile=external.profile, cluster_id=external.cluster_id,
                                   n=1, timeout=90, standby=1)
        try:
            (old,) = [w.pid for w in cluster.workers]
            assert old in _pids_of(external.processes())   # the cluster's own engine
            spare = _wait_until(lambda: _warm_spares(cluster._group), 120, "a warm spare")
            assert not set(spare) & _pids_of(external.processes())   # launched by us
            cluster.restart()
            assert [w.pid for w in cluster.workers] == spare   # the spare, now the worker
            assert cluster.run(_REDUCE).display["data"]["text/plain"] == "1.0"
            print(f"attached, standby 1: restarted in {cluster.last_restart_seconds:.2f} s")
            _wait_until(lambda: not psutil.pid_exists(old), 15, "the old worker to end")
            assert external.alive()
            refill = _wait_until(lambda: _warm_spares(cluster._group), 120, "the next spare")
            assert not set(refill) & set(spare)
        finally:
            cluster.stop()
        # The idle spare ends; the worker made of a spare stays, like the cluster's engines.
        _wait_until(lambda: not any(psutil.pid_exists(pid) for pid in refill), 30,
                    "the idle spare to end")
        assert all(psutil.pid_exists(pid) for pid in spare)
    finally:
        for process in _engines_we_launched():
            process.kill()
        external.kill()
    # ipcluster's own log says whether it saw its engines stop (a restart kills them).
    print(external.log()[-1500:])


# -- bad input: no ipcluster needed ---------------------------------------------


def _one_line_error(out) -> str:
    """A ClusterSetupError as the notebook shows it: one line, no client traceback."""
    assert out.status == "error"
    assert out.error is not None and out.error["ename"] == "ClusterSetupError", out
    assert out.error["traceback"] == [f"ClusterSetupError: {out.error['evalue']}"]
    return out.error["evalue"]


def _usage_error(out) -> str:
    """IPython shows a UsageError as one stderr line (no error message, no traceback)."""
    assert out.status == "error"
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("UsageError: "), out.stderr
    return lines[0]


def test_magic_attach_bad_input(kernel, ipython_dir):
    missing = f"does-not-exist-{uuid.uuid4().hex[:6]}"
    began = time.monotonic()

    text = _one_line_error(kernel.execute(f"%tfdist attach --profile {missing}", timeout=30))
    assert f"no running ipyparallel cluster found (profile '{missing}')" in text
    assert f"ipcluster start -n 2 --profile {missing}" in text

    text = _one_line_error(kernel.execute("%tfdist attach --cluster-id nope", timeout=30))
    assert "no running ipyparallel cluster found" in text and "cluster id 'nope'" in text
    assert "ipcluster start -n 2" in text and "--cluster-id nope" in text

    text = _one_line_error(kernel.execute("%tfdist attach --url-file /nonexistent.json",
                                          timeout=30))
    assert "no connection file at /nonexistent.json" in text and "ipcluster start" in text

    text = _usage_error(kernel.execute("%tfdist attach --url-file /x.json --profile p",
                                       timeout=30))
    assert "either --url-file or --profile/--cluster-id" in text

    text = _usage_error(kernel.execute("%tfdist attach -n 0", timeout=30))
    assert "expected a whole number >= 1, got 0" in text

    assert time.monotonic() - began < 20
    out = kernel.ok("from tfmw_notebook.magics.session import active_cluster\n"
                    "print(active_cluster() is None)")
    assert out.stdout.strip() == "True"
    # A typo in the profile name leaves no stray profile directory behind.
    assert not os.path.exists(os.path.join(ipython_dir, f"profile_{missing}"))


def test_api_attach_bad_input(ipython_dir):
    missing = f"does-not-exist-{uuid.uuid4().hex[:6]}"
    with pytest.raises(ClusterSetupError) as info:
        TFCluster.attach(profile=missing, timeout=5)
    assert f"no running ipyparallel cluster found (profile '{missing}')" in str(info.value)
    assert f"`ipcluster start -n 2 --profile {missing}`" in str(info.value)
    assert not os.path.exists(os.path.join(ipython_dir, f"profile_{missing}"))

    with pytest.raises(ClusterSetupError) as info:
        TFCluster.attach(profile=missing, cluster_id="nope", timeout=5)
    assert "cluster id 'nope'" in str(info.value)
    assert f"--profile {missing} --cluster-id nope" in str(info.value)

    with pytest.raises(ClusterSetupError, match="no connection file at /nonexistent.json"):
        TFCluster.attach(url_file="/nonexistent.json", timeout=5)

    with pytest.raises(ValueError, match="Invalid value for argument `n`"):
        TFCluster.attach(profile=missing, n=0)
