"""A real OpenSSH server on each simulated host, and an ipyparallel profile that uses them.

Each host gets `sshd -D -e` with its own config, host key and log in a temporary
directory (nothing under /etc/ssh or ~/.ssh is read or changed), listening on the host's
address, key-only login for root. Clients use `ssh -F <ssh_config_path>`, which names
the key and switches off host key checking for the simulated hosts only.

`write_ssh_profile` writes an ipyparallel profile whose controller runs here (on the
bridge address) and whose engines ipyparallel's own SSHEngineSetLauncher starts on the
hosts, the way it would on real machines. `SeparateFiles` gives each host the files a
machine of its own would have (names a cluster's DNS gives, directories on its own disk),
for tests that run a recipe of docs/several-machines.md unchanged.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from functools import cache

import apt_packages
from sim_hosts import SimHost, SimHosts

log = logging.getLogger(__name__)


# Every engine needs this; a TensorFlow test later trains tf.keras (Keras 2) models on them.
ENGINE_ENVIRONMENT = {"TF_USE_LEGACY_KERAS": "1"}


def _have_openssh() -> bool:
    return all(shutil.which(tool) for tool in ("sshd", "ssh", "scp", "ssh-keygen"))


@cache
def ensure_openssh() -> str | None:
    """Make sure sshd, ssh, scp and ssh-keygen exist (apt-get them if not); else say why not."""
    if _have_openssh():
        return None
    reason = apt_packages.install(["openssh-server", "openssh-client"], "OpenSSH")
    return reason or (None if _have_openssh() else "OpenSSH still missing after apt-get install")


def _keygen(path: str) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "tfmw-sim", "-f", path],
                   check=True, capture_output=True, timeout=30)


def _uts_namespace(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/uts")
    except OSError:
        return None


class SshHosts:
    """One sshd per simulated host, and an ssh client config that reaches them all."""

    def __init__(self, sim: SimHosts, env: dict[str, str] | None = None):
        self.sim = sim
        self.env = dict(env or {})  # extra variables for every session on every host
        self.tmpdir: str | None = None
        self.client_key: str | None = None
        self.ssh_config_path: str | None = None
        self._sshd: dict[str, tuple[subprocess.Popen, str | None]] = {}  # name -> (proc, uts ns)

    def start(self, timeout: float = 30) -> SshHosts:
        """Start every sshd and wait until `ssh <address> hostname` answers on each host."""
        try:
            self._start(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self, timeout: float) -> None:
        sshd = shutil.which("sshd")
        if sshd is None:
            raise RuntimeError("sshd not found; call ensure_openssh() first")
        # Privilege separation directory; the Debian package makes it when its service
        # starts, which never happened here. Namespaces share the filesystem.
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        self.tmpdir = tempfile.mkdtemp(prefix="tfmw-sim-ssh-")
        self.client_key = os.path.join(self.tmpdir, "id_ed25519")
        _keygen(self.client_key)
        authorized_keys = os.path.join(self.tmpdir, "authorized_keys")
        shutil.copyfile(self.client_key + ".pub", authorized_keys)
        self.ssh_config_path = os.path.join(self.tmpdir, "ssh_config")
        client_blocks = []
        for host in self.sim.hosts:
            hdir = os.path.join(self.tmpdir, host.name)
            os.makedirs(os.path.join(hdir, "ipython"))
            _keygen(os.path.join(hdir, "ssh_host_ed25519_key"))
            # Sessions get their own IPYTHONDIR, as on another machine; ~/.ipython stays untouched.
            env = {"IPYTHONDIR": os.path.join(hdir, "ipython"), **self.env}
            config = os.path.join(hdir, "sshd_config")
            with open(config, "w") as f:
                f.write(self._sshd_config(host, hdir, authorized_keys, env))
            with open(os.path.join(hdir, "sshd.log"), "ab") as logf:
                proc = self.sim.popen(host, [sshd, "-D", "-e", "-f", config],
                                      stdin=subprocess.DEVNULL, stdout=logf, stderr=logf)
            self._sshd[host.name] = (proc, None)
            client_blocks.append(self._client_block(host))
        with open(self.ssh_config_path, "w") as f:
            f.write("\n".join(client_blocks))
        deadline = time.monotonic() + timeout
        for host in self.sim.hosts:
            self._wait_ready(host, deadline)

    @staticmethod
    def _sshd_config(host: SimHost, hdir: str, authorized_keys: str, env: dict) -> str:
        set_env = " ".join(f'"{k}={v}"' for k, v in env.items())
        return f"""\
ListenAddress {host.address}:22
AddressFamily inet
HostKey {hdir}/ssh_host_ed25519_key
PidFile none
AuthorizedKeysFile {authorized_keys}
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
# The key lives under /tmp, which StrictModes would reject as world-writable.
StrictModes no
UsePAM no
PrintMotd no
# ipyparallel opens several connections per engine at once, or sessions on one connection.
MaxStartups 100:30:200
MaxSessions 100
# scp speaks SFTP; the internal server needs no path to sftp-server.
Subsystem sftp internal-sftp
SetEnv {set_env}
LogLevel VERBOSE
"""

    def _client_block(self, host: SimHost) -> str:
        return f"""\
Host {host.address} {host.hostname}
    HostName {host.address}
    User root
    IdentityFile {self.client_key}
    IdentitiesOnly yes
    StrictHostKeyChecking no
    UserKnownHostsFile /dev/null
    GlobalKnownHostsFile /dev/null
    LogLevel ERROR
    BatchMode yes
    ConnectTimeout 5
    # A cut cable (link_down) ends a session within ~15 s instead of never.
    ServerAliveInterval 5
    ServerAliveCountMax 3
    # ipyparallel runs ~10 short ssh commands per engine; one shared connection per host
    # saves a key exchange and an sshd exec each time. stop() ends the masters.
    ControlMaster auto
    ControlPath {self.tmpdir}/cm-%C
    ControlPersist 60
"""

    def _wait_ready(self, host: SimHost, deadline: float) -> None:
        proc, _ = self._sshd[host.name]
        last = ""
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"sshd on {host.name} exited ({proc.returncode}):\n"
                                   f"{self.log(host)}")
            try:
                done = self.ssh(host, "hostname", timeout=max(1.0, deadline - time.monotonic()))
                if done.returncode == 0 and done.stdout.strip() == host.hostname:
                    # Whatever sshd spawns (sessions, engines) inherits its UTS namespace:
                    # stop() finds them by it, even after they left sshd's process group.
                    self._sshd[host.name] = (proc, _uts_namespace(proc.pid))
                    return
                last = done.stdout + done.stderr
            except subprocess.TimeoutExpired as e:
                last = str(e)
            if time.monotonic() > deadline:
                raise TimeoutError(f"sshd on {host.name} ({host.address}) did not answer: "
                                   f"{last}\n{self.log(host)}")
            time.sleep(0.1)

    def ssh(self, host: SimHost, command: str, timeout: float = 30) -> subprocess.CompletedProcess:
        """Run a shell command on the host through ssh, from here (the default namespace)."""
        return subprocess.run(["ssh", "-F", self.ssh_config_path, host.address, command],
                              capture_output=True, text=True, stdin=subprocess.DEVNULL,
                              timeout=timeout)

    def log(self, host: SimHost) -> str:
        """The end of the host's sshd log (sshd -e writes it to stderr)."""
        try:
            with open(os.path.join(self.tmpdir or "", host.name, "sshd.log")) as f:
                return f.read()[-4000:]
        except OSError:
            return ""

    def stop(self, timeout: float = 10) -> None:
        """Kill every sshd and everything it spawned, remove the temp dir. Never raises."""
        deadline = time.monotonic() + timeout
        hosts = {h.name: h for h in self.sim.hosts}
        if self.ssh_config_path:  # shared connections first, while sshd can still answer
            for host in self.sim.hosts:
                with contextlib.suppress(Exception):
                    subprocess.run(["ssh", "-F", self.ssh_config_path, "-O", "exit", host.address],
                                   capture_output=True, timeout=5)
        for name, (proc, uts) in self._sshd.items():
            try:
                self._kill_family(hosts[name], proc, uts, deadline)
            except Exception as e:  # cleanup goes on; SimHosts.cleanup() kills the rest
                log.warning("stopping sshd on %s: %r", name, e)
        self._sshd.clear()
        if self.tmpdir:
            shutil.rmtree(self.tmpdir, ignore_errors=True)
            self.tmpdir = self.ssh_config_path = self.client_key = None

    def _kill_family(self, host: SimHost, proc: subprocess.Popen, uts: str | None,
                     deadline: float) -> None:
        uts = uts or _uts_namespace(proc.pid)
        if uts == _uts_namespace(os.getpid()):
            uts = None  # not yet unshared: would match far too much
        while time.monotonic() < deadline:
            family = [pid for pid in self.sim.pids(host)
                      if pid == proc.pid or (uts and _uts_namespace(pid) == uts)]
            if not family:
                return
            for pid in family:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=0.05)  # reap sshd itself: it is our child

    def __enter__(self) -> SshHosts:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def write_ssh_profile(profile_dir: str, hosts: dict[str, int], controller_ip: str,
                      ssh_config: str, *, environment: dict[str, str] | None = None,
                      work_dir: str | None = None, remote_python: str = sys.executable) -> None:
    """Write an ipyparallel profile: controller here on controller_ip, engines over SSH.

    hosts maps an address (or ssh alias) to its engine count. Every engine gets
    ENGINE_ENVIRONMENT plus `environment`; `work_dir` becomes the engines' working
    directory (an ssh session starts in $HOME otherwise).

    The SSH launcher scp's the connection files into the engines' remote profile dir.
    On simulated hosts "remote" is this filesystem, and scp of a file onto itself would
    be a copy onto itself, so each host gets its own remote profile dir below this one.
    """
    os.makedirs(profile_dir, exist_ok=True)
    engines = {
        host: {"n": n, "remote_profile_dir": os.path.join(profile_dir, "remote", host)}
        for host, n in hosts.items()
    }
    engine_args = [f"--work-dir={work_dir}"] if work_dir else []
    settings = {
        "Cluster.engine_launcher_class": "ssh",
        "Cluster.controller_ip": controller_ip,
        # Without n the Cluster starts cpu_count() engines, whatever `engines` says.
        "Cluster.n": sum(hosts.values()),
        "Cluster.delay": 0.0,  # engines wait for the controller's connection info anyway
        "SSHEngineSetLauncher.engines": engines,
        "SSHEngineSetLauncher.ssh_args": ["-F", ssh_config],
        "SSHEngineSetLauncher.scp_args": ["-F", ssh_config],
        "SSHEngineSetLauncher.remote_python": remote_python,
        "SSHEngineSetLauncher.environment": {**ENGINE_ENVIRONMENT, **(environment or {})},
        "SSHEngineSetLauncher.engine_args": engine_args,
    }
    lines = ["# Written by tests/sim_ssh.py: controller here, engines on simulated hosts by SSH.",
             "c = get_config()  # noqa: F821", ""]
    lines += [f"c.{key} = {value!r}" for key, value in settings.items()]
    with open(os.path.join(profile_dir, "ipcluster_config.py"), "w") as f:
        f.write("\n".join(lines) + "\n")


class SeparateFiles:
    """The simulated hosts of `sim`, with files as separate machines have them.

    Every process started on a host (an sshd, so every session and engine it spawns)
    runs in the mount namespace `ip netns exec` gave it, and there
    - /etc/hosts is a file of ours naming the hosts and this machine (its hostname at the
      bridge address), as a cluster's DNS would have them; and
    - each path in `private` is an empty directory of that host's own, where real hosts
      would each have their own disk (the simulated hosts share this machine's files).
    Nothing outside those namespaces changes. Stands in for SimHosts, e.g. in SshHosts.
    """

    def __init__(self, sim: SimHosts, private: tuple[str, ...] = ()):
        self._sim = sim
        self.private = tuple(os.path.abspath(path) for path in private)
        self.dir = tempfile.mkdtemp(prefix="tfmw-sim-files-")
        self.etc_hosts = os.path.join(self.dir, "hosts")
        lines = ["127.0.0.1 localhost", f"{sim.bridge_address} {socket.gethostname()}"]
        lines += [f"{h.address} {h.hostname}" for h in sim.hosts]
        with open(self.etc_hosts, "w") as f:
            f.write("\n".join(lines) + "\n")
        for host in sim.hosts:
            for path in self.private:
                os.makedirs(self.own_dir(host, path))

    def __getattr__(self, name):
        return getattr(self._sim, name)

    def own_dir(self, host: SimHost, path: str) -> str:
        """Where the host's own `path` (one of `private`) is in this machine's files."""
        return os.path.join(self.dir, host.name, str(self.private.index(path)))

    def popen(self, host: SimHost, argv: list[str], **popen_kwargs) -> subprocess.Popen:
        mounts = [f"mount --bind {shlex.quote(self.etc_hosts)} /etc/hosts"]
        mounts += [f"mkdir -p {shlex.quote(path)} && mount --bind "
                   f"{shlex.quote(self.own_dir(host, path))} {shlex.quote(path)}"
                   for path in self.private]
        return self._sim.popen(host, ["sh", "-c", " && ".join(mounts) + ' && exec "$@"', "sh",
                                      *argv], **popen_kwargs)

    def remove(self) -> None:
        """Remove our files (the mounts end with the hosts' processes)."""
        shutil.rmtree(self.dir, ignore_errors=True)
