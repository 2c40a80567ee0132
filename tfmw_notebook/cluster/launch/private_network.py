"""A network of their own for the workers we start, so nobody else can reach them.

TensorFlow's gRPC server (one per worker) listens on every interface, without
authentication, and TensorFlow has no setting to change that. The engines of
`%tfdist start` therefore run in one private network namespace that holds only a
loopback: their TensorFlow ports exist there and nowhere else, and the workers
reach each other at 127.0.0.1. They reach the controller over ipyparallel's ipc
transport: Unix sockets live in the file system, which the namespace shares, in a
directory only this user can enter.

Root gets the namespace directly; anyone else inside a user namespace of their own
(`unshare --user --map-root-user`, which Linux allows without privileges). Where
neither works (another OS, user namespaces disabled, a container without the
right), `open_private_network` raises IsolationUnavailable and the caller falls
back to the host's network. Knows nothing of ipyparallel or TensorFlow.
"""

from __future__ import annotations

import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from typing import IO

_KEEPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "network_keeper.py")
_OPEN_SECONDS = 10.0
_SOCKET_DIR_PREFIX = "tfmw-ipc-"
# The controller binds Unix sockets `<socket dir>/engine-<port>`: a Unix socket path holds
# at most 107 bytes on Linux, and ZeroMQ's bind fails past it (the controller exits with 1).
_LONGEST_SOCKET_PATH = 107
_SOCKET_NAME = "/engine-65535"


class IsolationUnavailable(RuntimeError):
    """This machine cannot give the workers a private network (the reason is the text)."""


class PrivateNetwork:
    """One network namespace with only a loopback, held open by a keeper process."""

    def __init__(self, keeper: subprocess.Popen, *, in_user_namespace: bool, socket_dir: str):
        self._keeper = keeper
        self.in_user_namespace = in_user_namespace
        self.socket_dir = socket_dir   # for the controller's Unix sockets (mode 0700)

    @property
    def keeper_pid(self) -> int:
        return self._keeper.pid

    def command_prefix(self) -> list[str]:
        """Put this before a command to run it inside the namespace (same pid, as
        nsenter execs the command)."""
        prefix = ["nsenter", f"--target={self._keeper.pid}", "--net"]
        if self.in_user_namespace:
            # Keep our ids: the namespace forbids setgroups, which nsenter would call.
            prefix[2:2] = ["--user", "--preserve-credentials"]
        return prefix + ["--"]

    def is_open(self) -> bool:
        return self._keeper.poll() is None

    def reopen(self, timeout: float = _OPEN_SECONDS) -> None:
        """A new namespace, if the keeper has ended (killed from outside): engines
        started from now on go there (the Unix socket directory stays)."""
        if self.is_open():
            return
        _end(self._keeper)
        self._keeper = _start_keeper(_unshare_command(self.in_user_namespace), timeout)

    def close(self) -> None:
        """End the keeper (processes still inside keep the namespace until they end)."""
        stdin, stdout, stderr = _pipes(self._keeper)
        if self._keeper.poll() is None:
            stdin.close()
            try:
                self._keeper.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._keeper.kill()
                self._keeper.wait(timeout=5)
        for stream in (stdout, stderr):
            stream.close()
        shutil.rmtree(self.socket_dir, ignore_errors=True)


def open_private_network(timeout: float = _OPEN_SECONDS) -> PrivateNetwork:
    """Make the namespace and start its keeper; IsolationUnavailable if impossible."""
    if not sys.platform.startswith("linux"):
        raise IsolationUnavailable(f"network namespaces exist only on Linux, not {sys.platform}")
    missing = [tool for tool in ("unshare", "nsenter") if shutil.which(tool) is None]
    if missing:
        raise IsolationUnavailable(f"{' and '.join(missing)} (util-linux) not found")
    in_user_namespace = os.geteuid() != 0
    keeper = _start_keeper(_unshare_command(in_user_namespace), timeout)
    _remove_dead_kernels_socket_dirs()
    # 0700: only this user connects. Named by this process, to be swept when it is gone.
    socket_dir = tempfile.mkdtemp(prefix=f"{_SOCKET_DIR_PREFIX}{os.getpid()}-",
                                  dir=_socket_base())
    return PrivateNetwork(keeper, in_user_namespace=in_user_namespace, socket_dir=socket_dir)


def _socket_base() -> str:
    """The temp directory, or /tmp where the temp directory's path is too long for the
    sockets (a TMPDIR deep in a project or a test's directory)."""
    base = tempfile.gettempdir()
    longest = os.fsencode(f"{base}/{_SOCKET_DIR_PREFIX}{os.getpid()}-{'x' * 8}{_SOCKET_NAME}")
    return base if len(longest) <= _LONGEST_SOCKET_PATH else "/tmp"   # x: mkdtemp's 8


def _remove_dead_kernels_socket_dirs() -> None:
    """A kernel that was killed, or exited without `%tfdist stop`, leaves its directory."""
    for base in dict.fromkeys([_socket_base(), tempfile.gettempdir()]):
        _remove_dead_socket_dirs_in(base)


def _remove_dead_socket_dirs_in(base: str) -> None:
    for name in os.listdir(base):
        pid = name[len(_SOCKET_DIR_PREFIX):].split("-", 1)[0]
        if not name.startswith(_SOCKET_DIR_PREFIX) or not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(os.path.join(base, name), ignore_errors=True)
        except PermissionError:
            pass   # another user's live kernel


def _unshare_command(in_user_namespace: bool) -> list[str]:
    if in_user_namespace:
        return ["unshare", "--user", "--map-root-user", "--net"]
    return ["unshare", "--net"]


def _start_keeper(command: list[str], timeout: float) -> subprocess.Popen:
    # A session of its own: the kernel's interrupt goes to the kernel's process group.
    keeper = subprocess.Popen(command + [sys.executable, "-I", _KEEPER],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, start_new_session=True)
    try:
        _wait_until_ready(keeper, time.monotonic() + timeout)
    except IsolationUnavailable:
        _end(keeper)
        raise
    return keeper


def _pipes(keeper: subprocess.Popen) -> tuple[IO[bytes], IO[bytes], IO[bytes]]:
    """The keeper's stdin, stdout and stderr (_start_keeper opens all three as pipes)."""
    assert keeper.stdin and keeper.stdout and keeper.stderr
    return keeper.stdin, keeper.stdout, keeper.stderr


def _wait_until_ready(keeper: subprocess.Popen, deadline: float) -> None:
    _, stdout, stderr = _pipes(keeper)
    ready, _, _ = select.select([stdout], [], [], max(0.0, deadline - time.monotonic()))
    line = stdout.readline().decode(errors="replace").strip() if ready else ""
    if line == "ready":
        return
    if not ready:
        raise IsolationUnavailable("making a private network namespace did not finish in time")
    keeper.wait(timeout=5)
    said = stderr.read().decode(errors="replace").strip().splitlines()
    why = (said[-1] if said else "") or line or f"exit code {keeper.returncode}"
    raise IsolationUnavailable(f"could not make a private network namespace: {why}")


def _end(keeper: subprocess.Popen) -> None:
    if keeper.poll() is None:
        keeper.kill()
    keeper.wait(timeout=5)
    for stream in _pipes(keeper):
        stream.close()


_warned: list[str] = []   # the fallback is said once per kernel


def network_for_workers(isolate: bool = True) -> PrivateNetwork | None:
    """The private network to start workers in, or None: not wanted, or not possible
    here (then, once per kernel, a one-line warning says what is exposed)."""
    if not isolate:
        return None
    try:
        return open_private_network()
    except IsolationUnavailable as why:
        if not _warned:
            # Imported here: this module also runs as a file of its own (tests/test_isolation.py)
            from ...errors import for_caller

            _warned.append(str(why))
            sys.stderr.write(for_caller(
                f"tfdist: warning: {why}, so the workers' TensorFlow ports (gRPC, no "
                "authentication) listen on every network interface of this machine, open "
                "to anyone who can reach it; `TFCluster.start(isolate=False)` accepts this "
                "without this warning\n"))
            sys.stderr.flush()
        return None
