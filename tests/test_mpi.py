"""Open MPI across two simulated hosts, used exactly as docs/several-machines.md's MPI recipe says.

`mpiexec` on this machine (the login node) starts Open MPI's daemons on simhost1 and
simhost2 over their sshd, with a hostfile naming them (tests/sim_mpi.py). `ipcluster
start` runs with the recipe's command and `ipcluster_config.py` line, taken from that page
(tests/doc_recipes.py), so the recipe and the test cannot drift apart; the
notebook attaches with the recipe's line. Only the sizes change: 2 engines, one per
host, and the hostfile's path.
"""

from __future__ import annotations

import json
import os
import time

import pytest

from doc_recipes import recipe
from kernel_session import kernel_with_extension
from recipe_cluster import RecipeIpcluster, named_at
from sim_hosts import sim_hosts_or_skip
from sim_mpi import MpiHosts, ensure_openmpi
from test_multihost import FIT_WITH_MARKER, QUICK_FIT, REDUCE, host_pids, status, wait_for
from test_multihost_ssh import WARM_SPARES, fit_cut_off_midway

pytestmark = pytest.mark.timeout(300)

HOSTFILE_IN_DOCS = "/path/to/hosts"
FIT = "%%tfdist{flags}\n" + FIT_WITH_MARKER


def sized_recipe(mpi: MpiHosts):
    return recipe("MPI").sized({"-n 8": "-n 2", HOSTFILE_IN_DOCS: mpi.hostfile})


def job_processes(sim) -> dict[int, str]:
    """{pid: command} of the MPI job on the hosts: Open MPI's daemons and the engines."""
    found = {}
    for pids in host_pids(sim).values():
        for pid in pids:
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    command = f.read().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if "ipyparallel" in command or os.path.basename(command.split(" ")[0]) == "orted":
                found[pid] = command
    return found


def daemons(sim) -> set[int]:
    """Open MPI's daemons (orted) on the hosts: one per host while a job runs."""
    return {pid for pid, command in job_processes(sim).items()
            if os.path.basename(command.split(" ")[0]) == "orted"}


def engine_pids(sim) -> set[int]:
    return {pid for pid, command in job_processes(sim).items()
            if "ipyparallel.engine" in command and "nanny" not in command}


class MpiIpcluster(RecipeIpcluster):
    """The recipe's `ipcluster start` on the login node, its config in the default
    profile (of the test's IPYTHONDIR, see conftest.py)."""

    def __init__(self, mpi: MpiHosts, ipython_dir: str, workdir: str):
        super().__init__(sized_recipe(mpi), os.path.join(ipython_dir, "profile_default"),
                         workdir, mpi.env)


@pytest.fixture(scope="module")
def sim():
    with sim_hosts_or_skip(2) as hosts:
        reason = ensure_openmpi()
        if reason:
            pytest.skip(reason)
        yield hosts


@pytest.fixture(scope="module")
def mpi(sim):
    with MpiHosts(sim) as hosts:
        yield hosts


@pytest.fixture(scope="module")
def ipcluster(mpi, ipython_dir, tmp_path_factory):
    cluster = MpiIpcluster(mpi, ipython_dir, str(tmp_path_factory.mktemp("login-node")))
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture(scope="module")
def kernel(mpi, ipcluster, tmp_path_factory):
    # The notebook runs on the login node: a restart starts `mpiexec` from the kernel,
    # with the login node's Open MPI settings.
    saved = {name: os.environ.get(name) for name in mpi.env}
    os.environ.update(mpi.env)
    try:
        with kernel_with_extension(str(tmp_path_factory.mktemp("mpi-kernel"))) as session:
            yield session
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def test_recipe_attach_trains_across_two_mpi_hosts(sim, ipcluster, kernel):
    (attach,) = [line for line in ipcluster.recipe.notebook if line.startswith("%tfdist attach")]
    began = time.monotonic()
    out = kernel.ok(attach, timeout=180)
    assert "2 workers ready" in out.stdout, out.stdout + ipcluster.output()
    print(f"MPI: attach {time.monotonic() - began:.1f} s "
          f"({time.monotonic() - ipcluster.started:.1f} s from `ipcluster start`)")
    kernel.ok("%%tfdist\n" + QUICK_FIT)
    out = kernel.ok("%%tfdist\nhistory = model.fit(dataset, epochs=2, steps_per_epoch=10, "
                    "verbose=0)\nhistory.history['loss'][-1] < history.history['loss'][0]",
                    timeout=120)
    assert out.results[-1]["text/plain"] == "True"
    rows = status(kernel)
    assert [row["host"] for row in rows] == [h.hostname for h in sim.hosts], rows
    assert [row["address"].rsplit(":", 1)[0] for row in rows] == [h.address for h in sim.hosts]
    # One MPI job: an Open MPI daemon on each host runs that host's engine.
    assert len(daemons(sim)) == len(sim.hosts), job_processes(sim)
    assert {row["pid"] for row in rows} == engine_pids(sim)


def test_killed_rank_is_named_with_its_host_and_the_fit_completes_in_a_new_mpi_job(
        sim, ipcluster, kernel, tmp_path):
    ipcluster.wait_past_early_shutdown()
    rows = status(kernel)
    victim = rows[1]
    assert victim["host"] == sim.hosts[1].hostname
    old = set(job_processes(sim))
    marker = str(tmp_path / "killed")
    # A backup every 4 steps: the kill (at the 6th) comes after one, so there is one to resume
    # from (with the default, every epoch, there was none yet and the fit starts over).
    code = FIT.format(flags=" --max-restarts 1 --backup-every 4", rank=1, marker=marker, epochs=3,
                      action="os.kill(os.getpid(), signal.SIGKILL)")
    began = time.monotonic()
    out = kernel.execute(code, timeout=240)
    took = time.monotonic() - began
    ended = time.time()

    assert out.status == "ok", out.error_text + out.stderr + ipcluster.output()
    name = f"1 (pid {victim['pid']} on {victim['host']}, "
    noticed = named_at(out, name, ended) - float(open(marker).read())
    assert noticed <= 10.0, noticed
    assert f"restart 1 of 1 after: worker {name}" in out.stderr, out.stderr
    assert "resum" in out.stdout + out.stderr   # the fit went on from its backup
    # A new MPI job, started through the launcher: new daemons and engines on both hosts.
    rows = status(kernel)
    assert all(row["alive"] for row in rows)
    assert [row["host"] for row in rows] == [h.hostname for h in sim.hosts], rows
    assert not {row["pid"] for row in rows} & old
    assert {row["pid"] for row in rows} == engine_pids(sim)
    wait_for(lambda: not set(job_processes(sim)) & old, 15, "the old MPI job to be gone")
    assert len(daemons(sim)) == len(sim.hosts), job_processes(sim)
    print(f"MPI: killed rank named in {noticed:.2f} s; --max-restarts 1 fit {took:.1f} s")


def test_min_workers_goes_on_in_a_job_on_the_host_left_and_resize_grows_back(
        sim, ipcluster, kernel, tmp_path):
    """A floor of 1 of the 2 workers (`cluster.min_workers`, as `--min-workers 1` sets it);
    simhost1, the hostfile's first host and the chief's, cut off mid-fit: the cell completes
    on simhost2's worker, restarted through mpiexec told that host alone (`--host
    simhost2:1` beside the recipe's hostfile; without it, mpiexec would put the one engine
    on the first host); once simhost1 is back, `resize -n 2` starts a job on both again."""
    ipcluster.wait_past_early_shutdown()
    cut, left = sim.hosts
    try:
        out = fit_cut_off_midway(kernel, sim, cut, rank=0, min_workers=1, tmp_path=tmp_path)
        assert out.status == "ok", out.error_text + out.stderr[-3000:] + ipcluster.output()
        assert "going on with the 1 worker of the hosts left" in out.stderr, out.stderr
        rows = status(kernel)
        assert [row["host"] for row in rows] == [left.hostname], rows
    finally:
        sim.link_up(cut)
    kernel.ok("%tfdist resize -n 2", timeout=240)
    rows = status(kernel)
    assert [row["host"] for row in rows] == [h.hostname for h in sim.hosts], rows
    assert kernel.ok(REDUCE, timeout=60).results[-1]["text/plain"] == "2.0"
    # The engine left running on the cut-off host ends once it is back (its job is gone).
    workers = {row["pid"] for row in rows}
    wait_for(lambda: engine_pids(sim) == workers, 30, "only the workers' engines to run")


def test_stop_lets_go_of_the_job_spares_come_in_one_of_their_own_and_ipcluster_stop_ends_all(
        sim, ipcluster, kernel):
    """`%tfdist stop` lets go of the recipe's MPI job (it runs on). Attached again with
    `--standby 2`, the spares come through the cluster's launcher, an mpiexec of their own
    (the variables TensorFlow reads at import passed on with `-x`), one on each host, and
    import TensorFlow there; a restart makes them the workers (K = N: nothing waits for
    mpiexec) and the pool refills. The recipe's `ipcluster stop` then ends every job."""
    (let_go,) = [line for line in ipcluster.recipe.notebook if line == "%tfdist stop"]
    (attach,) = [line for line in ipcluster.recipe.notebook if line.startswith("%tfdist attach")]
    running = set(job_processes(sim))
    kernel.ok(let_go, timeout=60)
    time.sleep(1)
    assert set(job_processes(sim)) == running   # the same job runs on
    out = kernel.ok(attach + " --standby 2", timeout=180)
    assert "2 workers ready" in out.stdout and "2 spare engines start" in out.stdout, out.stdout
    ipcluster.wait_past_early_shutdown()   # else ending the workers' job ends the cluster
    workers = {row["pid"] for row in status(kernel)}
    spares = json.loads(kernel.ok(WARM_SPARES, timeout=240).stdout.strip().splitlines()[-1])
    assert set(spares) <= engine_pids(sim) - workers   # on the hosts, through mpiexec
    out = kernel.ok("%tfdist restart", timeout=180)
    rows = status(kernel)
    assert sorted(row["pid"] for row in rows) == spares, out.stdout
    assert sorted(row["host"] for row in rows) == [h.hostname for h in sim.hosts], rows
    assert kernel.ok(REDUCE, timeout=60).results[-1]["text/plain"] == "2.0"
    refill = json.loads(kernel.ok(WARM_SPARES, timeout=240).stdout.strip().splitlines()[-1])
    assert len(refill) == 2 and not set(refill) & set(spares)
    print(f"MPI, standby 2: {out.stdout.strip()}")
    kernel.ok(let_go, timeout=60)

    done = ipcluster.stop()
    assert done.returncode == 0, done.stderr
    wait_for(lambda: not job_processes(sim), 60, "every process of the MPI jobs to end")
    assert ipcluster.process.returncode is not None
    assert not os.path.exists(ipcluster.cluster_file)
