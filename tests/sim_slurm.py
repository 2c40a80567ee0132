"""A real Slurm on simulated hosts: munged and slurmctld on the first, slurmd on the others.

Debian's `slurm-wlm` and `munge`, started here with files written into one temporary
directory: no system service, nothing under /etc read or changed. Every daemon gets
`-f`/`SLURM_CONF` for its config and munge's `--socket`/`--key-file`/... for its files.
The hosts share the filesystem, so one munged (its socket is a file) serves them all,
as one munged per host with the same key would.

Each daemon runs in a private mount namespace with its own /etc/hosts bind-mounted
over the machine's (the machine's file stays untouched): the simulated hosts and the
login node (this machine, under its own hostname) resolve to their test-network
addresses there, as a cluster's DNS would have them. Jobs inherit it from slurmd.

Cleanup: stop() ends every process the daemons started (found by their mount
namespaces) and removes the directory. A killed run's processes die with its host
namespaces (sim_hosts.remove_leftovers); its directory, named with PREFIX and holding
its owner's pid and start time, is removed by remove_leftovers() here.
"""

from __future__ import annotations

import contextlib
import glob
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from functools import cache

import apt_packages
from sim_hosts import SimHost, SimHosts, _owner_alive, _owner_tag

log = logging.getLogger(__name__)

PREFIX = "tfmw-sim-slurm-"
OWNER_FILE = "owner"
CPUS_PER_NODE = 2
GPUS_PER_NODE = 2   # Slurm-scheduled GPUs (no devices): `--gpus-per-task` schedules as on GPU nodes
TOOLS = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "scancel", "squeue", "sinfo")


def _have_slurm() -> bool:
    return all(shutil.which(tool) for tool in TOOLS)


@cache
def ensure_slurm() -> str | None:
    """Make sure Slurm and munge are installed (apt-get them if not); else say why not."""
    if _have_slurm():
        return None
    reason = apt_packages.install(["slurm-wlm", "munge"], "Slurm")
    return reason or (None if _have_slurm() else "Slurm still missing after apt-get install")


def remove_leftovers() -> list[str]:
    """Remove the directories of earlier runs whose owner process is gone. Never raises."""
    removed = []
    for path in glob.glob(os.path.join(tempfile.gettempdir(), PREFIX + "*")):
        try:
            with open(os.path.join(path, OWNER_FILE)) as f:
                alive = _owner_alive(f.read().strip())
        except OSError:
            alive = False
        if not alive:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    if removed:
        log.warning("removed Slurm leftovers of earlier runs: %s", removed)
    return removed


def _mount_namespace(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:
        return None


class SlurmHosts:
    """munged + slurmctld on sim.hosts[0], one slurmd on each other host.

    `env` (SLURM_CONF) is what a Slurm client on the login node (this machine) needs.
    """

    def __init__(self, sim: SimHosts):
        if len(sim.hosts) < 2:
            raise ValueError("Slurm needs a controller host and at least one compute host")
        self.sim = sim
        self.controller, self.nodes = sim.hosts[0], sim.hosts[1:]
        self.dir = ""
        self.conf = ""
        self._daemons: list[tuple[str, subprocess.Popen, str | None]] = []  # (name, proc, mnt ns)

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": self.conf}

    def start(self, timeout: float = 60) -> SlurmHosts:
        """Write the files, start the daemons, wait until every node is idle."""
        try:
            self._start(time.monotonic() + timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self, deadline: float) -> None:
        self.dir = tempfile.mkdtemp(prefix=PREFIX)
        with open(os.path.join(self.dir, OWNER_FILE), "w") as f:
            f.write(_owner_tag())
        for sub in ("munge", "state", "log", *(f"spool/{n.hostname}" for n in self.nodes)):
            os.makedirs(os.path.join(self.dir, sub), mode=0o700)
        key = os.path.join(self.dir, "munge", "munge.key")
        with open(os.open(key, os.O_WRONLY | os.O_CREAT, 0o600), "wb") as f:
            f.write(os.urandom(1024))
        self.conf = os.path.join(self.dir, "slurm.conf")
        with open(self.conf, "w") as f:
            f.write(self._slurm_conf())
        with open(os.path.join(self.dir, "gres.conf"), "w") as f:
            f.write(self._gres_conf())
        with open(os.path.join(self.dir, "hosts"), "w") as f:
            f.write(self._hosts_file())
        munge = os.path.join(self.dir, "munge")
        self._daemon("munged", self.controller, [
            "munged", "-F", "--force", f"--socket={munge}/munge.socket",
            f"--key-file={key}", f"--pid-file={munge}/munged.pid",
            f"--log-file={self.dir}/log/munged.log", f"--seed-file={munge}/munged.seed"])
        self._wait(lambda: os.path.exists(f"{munge}/munge.socket"), deadline, "munged's socket")
        self._daemon("slurmctld", self.controller, ["slurmctld", "-D", "-i", "-f", self.conf])
        for node in self.nodes:
            self._daemon(f"slurmd-{node.hostname}", node,
                         ["slurmd", "-D", "-f", self.conf, "-N", node.hostname])
        self._wait(self._all_idle, deadline, "every slurmd to report its node idle")

    def _slurm_conf(self) -> str:
        d, c = self.dir, self.controller
        nodes = "\n".join(f"NodeName={n.hostname} NodeAddr={n.address} CPUs={CPUS_PER_NODE} "
                          f"Gres=gpu:{GPUS_PER_NODE} State=UNKNOWN" for n in self.nodes)
        return f"""\
# Written by tests/sim_slurm.py for simulated hosts; removed with its directory.
ClusterName=tfmwsim
SlurmctldHost={c.hostname}({c.address})
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={d}/munge/munge.socket
SlurmUser=root
SlurmdUser=root
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool/%n
SlurmctldPidFile={d}/state/slurmctld.pid
SlurmdPidFile={d}/spool/slurmd-%n.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd-%n.log
# No cgroups in a container: track processes by parent pid, no task binding.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
GresTypes=gpu
ReturnToService=2
# slurmctld pings its nodes every third of this: a node cut off and back (test_slurm's
# shrink) answers within 10 s, not the default's 100 s, and its resources are freed then.
SlurmdTimeout=30
# A cancelled job's processes get SIGTERM, then SIGKILL this many seconds later.
KillWait=2
SchedulerParameters=sched_interval=1
{nodes}
PartitionName=sim Nodes={self._node_list()} Default=YES MaxTime=INFINITE State=UP
"""

    def _gres_conf(self) -> str:
        """GPUs Slurm schedules and hands out (CUDA_VISIBLE_DEVICES) with no hardware: gres/gpu
        wants a device file per GPU, and plain files of the usual names do."""
        os.makedirs(os.path.join(self.dir, "dev"))
        for index in range(GPUS_PER_NODE):
            open(os.path.join(self.dir, "dev", f"nvidia{index}"), "w").close()
        return (f"AutoDetect=off\nNodeName={self._node_list()} Name=gpu "
                f"File={self.dir}/dev/nvidia[0-{GPUS_PER_NODE - 1}]\n")

    def _node_list(self) -> str:
        return ",".join(n.hostname for n in self.nodes)

    def _hosts_file(self) -> str:
        lines = ["127.0.0.1 localhost",
                 f"{self.sim.bridge_address} {socket.gethostname()}"]   # the login node
        lines += [f"{h.address} {h.hostname}" for h in self.sim.hosts]
        return "\n".join(lines) + "\n"

    def _daemon(self, name: str, host: SimHost, argv: list[str]) -> None:
        """Start argv on host in a mount namespace of its own with our /etc/hosts."""
        # nsenter, not `ip netns exec`: that remounts /sys, and slurmd needs the
        # machine's /sys/fs/cgroup to start (even with proctrack/linuxproc).
        wrapped = ["nsenter", f"--net=/run/netns/{host.namespace}", "unshare", "--uts", "--mount",
                   "sh", "-c", 'hostname "$0" && mount --bind "$1" /etc/hosts && shift 2 && '
                   'exec "$@"', host.hostname, os.path.join(self.dir, "hosts"), "--", *argv]
        with open(os.path.join(self.dir, "log", f"{name}.out"), "ab") as out:
            proc = subprocess.Popen(wrapped, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                    env=dict(os.environ, **self.env))
        self._daemons.append((name, proc, None))

    def _wait(self, predicate, deadline: float, what: str) -> None:
        while not predicate():
            for name, proc, _ in self._daemons:
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited ({proc.returncode}) while waiting for "
                                       f"{what}:\n{self.logs()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out waiting for {what}:\n{self.logs()}")
            time.sleep(0.2)
        # Known only once the daemon has exec'd past `unshare --mount`.
        self._daemons = [(n, p, mnt or _mount_namespace(p.pid)) for n, p, mnt in self._daemons]

    def _all_idle(self) -> bool:
        done = self.run(["sinfo", "-h", "-N", "-o", "%N %T"], timeout=10)
        states = dict(line.split() for line in done.stdout.splitlines() if line.strip())
        return all(states.get(n.hostname) == "idle" for n in self.nodes)

    def node_state(self, node: SimHost) -> str:
        done = self.run(["sinfo", "-h", "-N", "-n", node.hostname, "-o", "%T"], timeout=10)
        return done.stdout.strip()

    def return_to_service(self, node: SimHost, timeout: float = 60) -> str:
        """What an administrator does for a node that was cut off mid-job and is back: down,
        then resume. Returns the node's state before.

        By itself Slurm frees such a node only when the ended job's terminate message gets
        through (slurmctld retries it every 60 s) or when the node was silent long enough to
        be marked down (SlurmdTimeout): 30 to 120 s here, and beyond a resize's wait on a
        loaded machine. That wait is Slurm's, not tfmw's; a test that needs the node again
        takes it back this way."""
        before = self.node_state(node)
        for state in ("State=DOWN Reason=back_from_a_cut", "State=RESUME"):
            done = self.run(["scontrol", "update", f"NodeName={node.hostname}", *state.split()])
            if done.returncode != 0:
                raise RuntimeError(f"scontrol update {state} failed: {done.stderr.strip()}")
        self._wait(lambda: self.node_state(node) == "idle", time.monotonic() + timeout,
                   f"{node.hostname} to be idle again")
        return before

    def run(self, argv: list[str], timeout: float = 30) -> subprocess.CompletedProcess:
        """A Slurm client command on the login node (this machine)."""
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              env=dict(os.environ, **self.env), stdin=subprocess.DEVNULL)

    def jobs(self) -> dict[str, tuple[str, str]]:
        """{job id: (state, node list)} of the jobs Slurm knows."""
        done = self.run(["squeue", "-h", "-o", "%i %T %N"], timeout=10)
        rows = [line.split(None, 2) for line in done.stdout.splitlines() if line.strip()]
        return {row[0]: (row[1], row[2] if len(row) > 2 else "") for row in rows}

    def logs(self) -> str:
        """The end of every daemon's log, for error messages."""
        parts = []
        for path in sorted(glob.glob(os.path.join(self.dir or "/nonexistent", "log", "*"))):
            with contextlib.suppress(OSError), open(path, errors="replace") as f:
                parts.append(f"--- {os.path.basename(path)}\n{f.read()[-1500:]}")
        return "\n".join(parts)

    def stop(self, timeout: float = 10) -> None:
        """End the daemons and all they started (jobs too), remove the directory.
        Never raises."""
        deadline = time.monotonic() + timeout
        spaces = {mnt or _mount_namespace(p.pid) for _, p, mnt in self._daemons} - {
            _mount_namespace(os.getpid()), None}
        try:
            while time.monotonic() < deadline:
                family = [pid for host in self.sim.hosts for pid in self.sim.pids(host)
                          if _mount_namespace(pid) in spaces]
                if not family:
                    break
                for pid in family:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                time.sleep(0.05)
        except Exception as e:  # cleanup goes on; SimHosts.cleanup() kills the rest
            log.warning("stopping Slurm: %r", e)
        for _, proc, _ in self._daemons:
            with contextlib.suppress(Exception):
                proc.kill()
                proc.wait(timeout=2)
        self._daemons.clear()
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = ""

    def __enter__(self) -> SlurmHosts:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
