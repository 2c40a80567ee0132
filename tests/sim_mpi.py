"""Open MPI across simulated hosts, the way a site without a batch system runs it.

Debian's `openmpi-bin` and `mpi4py` in this virtualenv; on each simulated host a real
sshd (tests/sim_ssh.py), through which `mpiexec` on this machine (the login node)
starts Open MPI's daemons, as it does over SSH between real machines. Nothing under
/etc or ~/.ssh is read or changed:

- the hosts resolve names from a hosts file of ours, bind-mounted over /etc/hosts in
  each sshd's own mount namespace (the one `ip netns exec` makes), so every session,
  Open MPI daemon and engine sees the simulated hosts and the login node (this
  machine's hostname, at the bridge address) as a cluster's DNS would have them;
- `mpiexec` finds the hosts in an MPI hostfile and reaches them with the ssh config of
  tests/sim_ssh.py, named in Open MPI's `plm_rsh_agent` setting (an `OMPI_MCA_*`
  variable of the login node's environment, like a site's openmpi-mca-params.conf);
- Open MPI's own traffic (its daemons' wire-up, any message between ranks) stays on the
  test network: `oob_tcp_if_include` / `btl_tcp_if_include` name its subnet.

Open MPI refuses to run as root unless told it may; the tests run as root, so `env`
says so (OMPI_ALLOW_RUN_AS_ROOT*), which a user's own login would not need.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from functools import cache

import apt_packages
from sim_hosts import SimHost, SimHosts
from sim_ssh import SshHosts, ensure_openssh

TOOLS = ("mpiexec", "orted")
SLOTS_PER_HOST = 1   # 2 cores here: one engine per simulated host


def _have_openmpi() -> bool:
    return all(shutil.which(tool) for tool in TOOLS)


def _mpi4py_reason() -> str | None:
    done = subprocess.run([sys.executable, "-c", "import mpi4py"], capture_output=True,
                          text=True, timeout=60)
    if done.returncode != 0:
        return ("mpi4py is missing in the engines' Python (ipengine --mpi takes its id from "
                "the MPI rank): pip install -e '.[test]'")
    return None


@cache
def ensure_openmpi() -> str | None:
    """Make sure Open MPI, OpenSSH and mpi4py are there (apt-get Open MPI if not);
    else say why not."""
    reason = ensure_openssh()
    if reason:
        return reason
    if not _have_openmpi():
        reason = apt_packages.install(["openmpi-bin"], "Open MPI")
        if reason or not _have_openmpi():
            return reason or "Open MPI still missing after apt-get install openmpi-bin"
    return _mpi4py_reason()


class _WithHostsFile:
    """The simulated hosts, with every process started on them (the sshd and all it
    spawns) seeing `hosts_file` as /etc/hosts."""

    def __init__(self, sim: SimHosts, hosts_file: str):
        self._sim = sim
        self._hosts_file = hosts_file

    def __getattr__(self, name):
        return getattr(self._sim, name)

    def popen(self, host: SimHost, argv: list[str], **popen_kwargs) -> subprocess.Popen:
        # `ip netns exec` gave the process a private mount namespace: the bind mount
        # stays in it (and in its children's), the machine's /etc/hosts is untouched.
        return self._sim.popen(host, ["sh", "-c", 'mount --bind "$0" /etc/hosts && exec "$@"',
                                      self._hosts_file, *argv], **popen_kwargs)


class MpiHosts:
    """An sshd on each simulated host, a hostfile naming them, and the login node's
    environment for `mpiexec` (`env`)."""

    def __init__(self, sim: SimHosts):
        self.sim = sim
        self.hosts = sim.hosts
        self.dir = ""
        self.hostfile = ""
        self.ssh: SshHosts | None = None

    def start(self) -> MpiHosts:
        try:
            self.dir = tempfile.mkdtemp(prefix="tfmw-sim-mpi-")
            hosts_file = os.path.join(self.dir, "hosts")
            with open(hosts_file, "w") as f:
                f.write(self._hosts_file())
            self.hostfile = os.path.join(self.dir, "hostfile")
            with open(self.hostfile, "w") as f:
                f.write("".join(f"{h.hostname} slots={SLOTS_PER_HOST}\n" for h in self.hosts))
            self.ssh = SshHosts(_WithHostsFile(self.sim, hosts_file)).start()
        except BaseException:
            self.stop()
            raise
        return self

    def _hosts_file(self) -> str:
        lines = ["127.0.0.1 localhost",
                 f"{self.sim.bridge_address} {socket.gethostname()}"]   # the login node
        lines += [f"{h.address} {h.hostname}" for h in self.hosts]
        return "\n".join(lines) + "\n"

    @property
    def env(self) -> dict[str, str]:
        """What `mpiexec` on the login node needs here, as OMPI_* variables."""
        assert self.ssh is not None and self.ssh.ssh_config_path
        return {
            "OMPI_MCA_plm_rsh_agent": f"ssh -F {self.ssh.ssh_config_path}",
            "OMPI_MCA_oob_tcp_if_include": str(self.sim.subnet),
            "OMPI_MCA_btl_tcp_if_include": str(self.sim.subnet),
            # Tests run as root; a user's login would not.
            "OMPI_ALLOW_RUN_AS_ROOT": "1",
            "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        }

    def mpiexec(self, argv: list[str], n: int, timeout: float = 60) -> subprocess.CompletedProcess:
        """`mpiexec -n N --hostfile ... argv` on the login node (this machine)."""
        return subprocess.run(["mpiexec", "-n", str(n), "--hostfile", self.hostfile, *argv],
                              capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, env=dict(os.environ, **self.env))

    def stop(self) -> None:
        """End the sshds and all they started (Open MPI daemons, engines), remove the
        files. Never raises."""
        if self.ssh is not None:
            self.ssh.stop()
            self.ssh = None
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = ""

    def __enter__(self) -> MpiHosts:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
