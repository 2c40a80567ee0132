"""A real Slurm on simulated hosts, used exactly as docs/several-machines.md's Slurm recipe says.

slurmctld on simhost1, slurmd on simhost2 and simhost3 (tests/sim_slurm.py). This
machine is the login node: `ipcluster start` runs here with the recipe's command and
`ipcluster_config.py` lines, taken from that page (tests/doc_recipes.py), so the
recipe and the test cannot drift apart; the notebook attaches with the recipe's line.
Only the sizes change: 4 engines on 2 nodes with 2 CPUs and 2 (scheduled) GPUs each.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time

import pytest

from doc_recipes import recipe
from kernel_session import kernel_with_extension
from recipe_cluster import RecipeIpcluster, named_at
from sim_hosts import sim_hosts_or_skip
from sim_slurm import SlurmHosts, ensure_slurm, remove_leftovers
from test_multihost import FIT_WITH_MARKER, QUICK_FIT, REDUCE, status, wait_for
from test_multihost_ssh import WARM_SPARES, fit_cut_off_midway

pytestmark = pytest.mark.timeout(300)

SIZES = {"-n 8": "-n 4"}   # what the simulated nodes hold
SIZES_WITH_SPARES = {"-n 8": "-n 2"}   # 2 workers and 2 spares: the nodes' 4 CPUs
RECIPE = recipe("Slurm").sized(SIZES)
(ATTACH,) = [line for line in RECIPE.notebook if line.startswith("%tfdist attach ")]
(LET_GO,) = [line for line in RECIPE.notebook if line == "%tfdist stop"]
FIT = "%%tfdist{flags}\n" + FIT_WITH_MARKER


@pytest.fixture(scope="module")
def slurm():
    with sim_hosts_or_skip(3) as sim:
        reason = ensure_slurm()
        if reason:
            pytest.skip(reason)
        remove_leftovers()
        with SlurmHosts(sim) as hosts:
            yield hosts


@pytest.fixture(scope="module")
def ipcluster(slurm, ipython_dir, tmp_path_factory):
    """The recipe's `ipcluster start` on the login node, its config in the default profile
    (of the test's IPYTHONDIR, see conftest.py)."""
    cluster = RecipeIpcluster(RECIPE, os.path.join(ipython_dir, "profile_default"),
                              str(tmp_path_factory.mktemp("login-node")), slurm.env)
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture(scope="module")
def kernel(slurm, ipcluster, tmp_path_factory):
    # The notebook's Slurm client commands (sbatch on restart) find the site's config
    # the way every Slurm command here does.
    os.environ["SLURM_CONF"] = slurm.conf
    try:
        with kernel_with_extension(str(tmp_path_factory.mktemp("slurm-kernel"))) as session:
            yield session
    finally:
        del os.environ["SLURM_CONF"]


def running_job(slurm) -> str:
    """The one running Slurm job (the engines'), spread over both compute nodes."""
    jobs = {job: nodes for job, (state, nodes) in slurm.jobs().items() if state == "RUNNING"}
    assert len(jobs) == 1, (jobs, slurm.jobs())
    (job, nodes), = jobs.items()
    assert nodes == "simhost[2-3]", nodes
    return job


def test_recipe_attach_trains_across_two_slurm_nodes(slurm, ipcluster, kernel):
    began = time.monotonic()
    out = kernel.ok(ATTACH, timeout=180)
    assert "4 workers ready" in out.stdout, out.stdout
    print(f"Slurm: attach {time.monotonic() - began:.1f} s (from `ipcluster start`)")
    job = running_job(slurm)
    kernel.ok("%%tfdist\n" + QUICK_FIT)
    out = kernel.ok("%%tfdist\nhistory = model.fit(dataset, epochs=2, steps_per_epoch=10, "
                    "verbose=0)\nhistory.history['loss'][-1] < history.history['loss'][0]",
                    timeout=120)
    assert out.results[-1]["text/plain"] == "True"
    rows = status(kernel)
    assert [row["host"] for row in rows] == ["simhost2"] * 2 + ["simhost3"] * 2
    # Each worker advertises its own host's address, not the 127.0.0.1 the notebook
    # (on the login node, with the controller) sees the controller at.
    addresses = {row["address"].rsplit(":", 1)[0] for row in rows}
    assert addresses == {h.address for h in slurm.nodes}, rows
    # The recipe's sbatch options reached Slurm (a GPU per task, the time limit).
    shown = slurm.run(["scontrol", "show", "job", job]).stdout
    assert "TimeLimit=02:00:00" in shown and "gpu:1" in shown, shown


def test_killed_engine_is_named_with_host_and_job_and_the_fit_completes_via_sbatch(
        slurm, kernel, tmp_path):
    old_job = running_job(slurm)
    victim = status(kernel)[2]
    marker = str(tmp_path / "killed")
    # A backup every 4 steps: the kill (at the 6th) comes after one, so there is one to resume
    # from (with the default, every epoch, there was none yet and the fit starts over).
    code = FIT.format(flags=" --max-restarts 1 --backup-every 4", rank=2, marker=marker, epochs=3,
                      action="os.kill(os.getpid(), signal.SIGKILL)")
    began = time.monotonic()
    out = kernel.execute(code, timeout=240)
    took = time.monotonic() - began
    ended = time.time()

    assert out.status == "ok", out.error_text + out.stderr
    name = f"worker 2 (pid {victim['pid']} on simhost3, Slurm job {old_job},"
    noticed = named_at(out, name, ended) - float(open(marker).read())
    assert noticed <= 10.0, noticed
    assert "restart 1 of 1 after: worker 2" in out.stderr, out.stderr
    assert "resum" in out.stdout + out.stderr   # went on from its backup
    new_job = running_job(slurm)                # a new job, submitted through the launcher
    assert new_job != old_job
    assert [row["host"] for row in status(kernel)] == ["simhost2"] * 2 + ["simhost3"] * 2
    print(f"Slurm: killed engine named in {noticed:.2f} s; --max-restarts 1 fit {took:.1f} s")


def test_min_workers_goes_on_in_a_job_on_the_node_left_and_resize_grows_back(
        slurm, kernel, tmp_path):
    """A floor of 2 of the 4 workers (`cluster.min_workers`, as `--min-workers 2` sets it);
    simhost3 cut off mid-fit: the cell completes on simhost2's 2 workers, restarted through
    sbatch in a job told that node alone (`--nodelist`, beside the recipe's sbatch options);
    once simhost3 is back, `resize -n 4` submits a job on both nodes again."""
    old_job = running_job(slurm)
    cut = slurm.nodes[1]
    try:
        began = time.monotonic()
        out = fit_cut_off_midway(kernel, slurm.sim, cut, rank=2, min_workers=2,
                                 tmp_path=tmp_path)
        took = time.monotonic() - began
        assert out.status == "ok", out.error_text + out.stderr[-3000:]
        assert "going on with the 2 workers of the hosts left" in out.stderr, out.stderr
        assert [row["host"] for row in status(kernel)] == ["simhost2"] * 2
        running = {job: nodes for job, (state, nodes) in slurm.jobs().items()
                   if state == "RUNNING"}
        assert list(running.values()) == ["simhost2"] and old_job not in running, \
            slurm.jobs()
        (shrunk_job,) = running
        shown = slurm.run(["scontrol", "show", "job", shrunk_job]).stdout
        assert "ReqNodeList=simhost2 " in shown and "TimeLimit=02:00:00" in shown, shown
    finally:
        slurm.sim.link_up(cut)
    print(f"Slurm: went on with the node left, the cell took {took:.1f} s")
    began = time.monotonic()
    was = slurm.return_to_service(cut)
    print(f"Slurm: {cut.hostname} ({was}) idle again in {time.monotonic() - began:.1f} s")
    began = time.monotonic()
    kernel.ok("%tfdist resize -n 4", timeout=240)
    print(f"Slurm: resize -n 4 once simhost3 was back {time.monotonic() - began:.1f} s")
    assert running_job(slurm) not in (old_job, *running)
    assert [row["host"] for row in status(kernel)] == ["simhost2"] * 2 + ["simhost3"] * 2
    assert kernel.ok(REDUCE, timeout=60).results[-1]["text/plain"] == "4.0"


def test_stop_lets_go_of_the_slurm_job_and_attach_finds_it_again(slurm, kernel):
    job = running_job(slurm)
    kernel.ok(LET_GO, timeout=60)
    time.sleep(1)
    assert running_job(slurm) == job   # the engines still run, in the same job
    out = kernel.ok(ATTACH, timeout=120)
    assert "4 workers ready" in out.stdout, out.stdout


def test_cancelled_job_is_named_with_host_and_job_and_the_fit_completes_in_a_new_job(
        slurm, ipcluster, kernel, tmp_path):
    """A job ended under the cell (`scancel`: SIGTERM, then SIGKILL): the workers are named dead
    with their host and job, and the cell completes in a new job. `--grace off`: with the
    default grace a SIGTERM is a preemption, which backs up and stops in order
    (tests/test_exact_resume.py), and a fit whose last agreed step has passed runs to its end;
    here the workers must die under the cell."""
    job = running_job(slurm)
    kernel.ok("%%tfdist\n" + QUICK_FIT)
    marker = str(tmp_path / "training")
    code = FIT.format(flags=" --max-restarts 1 --grace off", rank=0, marker=marker, epochs=3,
                      action="pass")
    cancelled = {}

    def cancel_when_training():
        wait_for(lambda: os.path.exists(marker), 120, "training")
        cancelled["at"] = time.time()
        cancelled["scancel"] = slurm.run(["scancel", job])

    canceller = threading.Thread(target=cancel_when_training)
    canceller.start()
    began = time.monotonic()
    out = kernel.execute(code, timeout=240)
    took, ended = time.monotonic() - began, time.time()
    canceller.join(timeout=30)
    assert cancelled["scancel"].returncode == 0, cancelled["scancel"].stderr
    assert out.status == "ok", out.error_text + out.stderr
    # Every worker went silent; their hosts refuse their ports: dead, not cut off.
    # The first worker seen dead may be on either host: whichever the liveness check reaches
    # first after the cancel.
    first = re.search(rf"\(pid \d+ (on simhost[23], Slurm job {job}, )[^)]*\) died; restarting",
                      out.stderr)
    assert first, out.stderr
    name = first.group(1)
    noticed = named_at(out, name, ended) - cancelled["at"]
    assert noticed <= 10.0, noticed
    # The restart names the workers seen dead, with their host and the cancelled job. Which
    # ranks those are varies: a worker blocked in a collective runs its SIGTERM handler only
    # when that call returns, so Slurm's later SIGKILL may end it after the others are seen.
    assert re.search(rf"restart 1 of 1 after: worker \d \(pid \d+ on simhost[23], Slurm job "
                     rf"{job}, ", out.stderr), out.stderr
    assert running_job(slurm) != job
    print(f"Slurm: cancelled job named in {noticed:.2f} s; --max-restarts 1 fit {took:.1f} s")

    # What the recipe says ends a Slurm cluster: no job is left.
    done = ipcluster.stop()
    assert done.returncode == 0, done.stderr
    wait_for(lambda: not slurm.jobs(), 30, "every Slurm job to end")
    assert ipcluster.process.returncode is not None


def running_jobs(slurm) -> dict[str, str]:
    return {job: nodes for job, (state, nodes) in slurm.jobs().items() if state == "RUNNING"}


def test_standby_spares_come_in_a_slurm_job_and_the_restart_after_a_kill_takes_them(
        slurm, ipcluster, kernel, ipython_dir, tmp_path):
    """`attach --standby 2` on the recipe's cluster sized 2: the spares come through the
    cluster's launcher (sbatch: a job of their own) and import TensorFlow there; a worker
    killed mid-fit: the restart takes both (K = N: no worker waits for a job to start),
    the fit resumes, the workers' old job ends, and the pool refills in a new job."""
    ipcluster.close()   # the recipe's cluster of 4, ended by the test before
    sized = recipe("Slurm").sized(SIZES_WITH_SPARES)
    (attach,) = [line for line in sized.notebook if line.startswith("%tfdist attach ")]
    cluster = RecipeIpcluster(sized, os.path.join(ipython_dir, "profile_default"),
                              str(tmp_path), slurm.env)
    try:
        out = kernel.ok(attach + " --standby 2", timeout=240)
        assert "2 workers ready" in out.stdout and "2 spare engines start" in out.stdout, \
            out.stdout
        (workers_job,) = running_jobs(slurm)
        spares = json.loads(kernel.ok(WARM_SPARES, timeout=240).stdout.strip().splitlines()[-1])
        assert len(spares) == 2 and len(running_jobs(slurm)) == 2, slurm.jobs()
        cluster.wait_past_early_shutdown()   # else ending the old job ends the cluster
        kernel.ok("%%tfdist\n" + QUICK_FIT)
        marker = str(tmp_path / "killed")
        code = FIT.format(flags=" --max-restarts 1", rank=1, marker=marker, epochs=3,
                          action="os.kill(os.getpid(), signal.SIGKILL)")
        out = kernel.execute(code, timeout=240)
        assert out.status == "ok", out.error_text + out.stderr
        assert "restart 1 of 1 after: worker 1" in out.stderr, out.stderr
        assert "3 epochs" in out.stdout, out.stdout   # run again in full on the spares
        assert sorted(row["pid"] for row in status(kernel)) == spares
        wait_for(lambda: workers_job not in running_jobs(slurm), 60, "the old job to end")
        refill = json.loads(kernel.ok(WARM_SPARES, timeout=240).stdout.strip().splitlines()[-1])
        assert len(refill) == 2 and not set(refill) & set(spares)
        assert len(running_jobs(slurm)) == 2, slurm.jobs()   # the workers', the new spares'
        took = kernel.ok("from tfmw_notebook.magics.session import active_cluster as _c\n"
                         "print(f'{_c().last_restart_seconds:.1f}')").stdout.strip()
        print(f"Slurm, standby 2: the restart after the kill took {took} s")
        kernel.ok(LET_GO, timeout=60)
    finally:
        done = cluster.stop()
        cluster.close()
    assert done.returncode == 0, done.stderr
    wait_for(lambda: not slurm.jobs(), 60, "every Slurm job to end")
