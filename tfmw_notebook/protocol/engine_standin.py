"""The engine command of a cluster `%tfdist start` launches: a stand-in that has the
cluster's fork server make the engine. Standard library only, and run as a script (by
path), so that it starts in milliseconds: it imports nothing of the package.

Every engine used to import TensorFlow itself, seconds of CPU at each start and restart,
with a host's workers sharing its cores. The fork server (worker/boot/engine_forkserver.py)
imports it once and forks a ready engine for each stand-in that asks. ipyparallel's
launcher still sees one process per engine, this one: it passes on its arguments,
environment, working directory and standard streams (the engine's log), relays the
signals the launcher sends, and ends as the engine ended (its exit code, or killed by
the same signal), so exit codes and death causes read as before. The engine watches
this process in turn and ends with it (a SIGKILL here leaves no engine behind), and this
process watches the kernel that launched it, as engines did: a killed kernel's engines
are asked to stop (SIGTERM), then killed. The engine does not depend on the fork server
once forked: should the server end, its engines run on.

Anything amiss (no fork server named, none answering, one started for another
environment) and the stand-in runs the engine itself instead: it executes the plain
engine command in its own process, so a start is never lost to this, only slower.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import struct
import sys
import time

SOCKET_VARIABLE = "TFMW_FORK_SERVER"     # the fork server's Unix socket, for stand-ins
LAUNCHER_VARIABLE = "TFMW_LAUNCHED_BY"   # the kernel to end with (protocol/orphan_guard.py)
STANDIN_VARIABLE = "TFMW_STANDIN_PID"    # set in a forked engine: the launcher's pid for it
_RELAYED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT,
            signal.SIGUSR1, signal.SIGUSR2)
_CONNECT_SECONDS = 2.0
# The fork server answers once TensorFlow is imported; a loaded host may take long.
_ANSWER_SECONDS = 120.0
_LENGTH = struct.Struct("!I")
_WATCH_SECONDS = 1.0   # how often the launching kernel is looked for
_GRACE_SECONDS = 5.0   # between the SIGTERM and the SIGKILL of an orphaned engine


def encode_request(argv: list[str], environment: dict[str, str], cwd: str, pid: int) -> bytes:
    body = json.dumps({"argv": argv, "env": environment, "cwd": cwd, "pid": pid}).encode()
    return _LENGTH.pack(len(body)) + body


def decode_request(data: bytes) -> dict[str, object] | None:
    """The request in `data` once it is whole, else None."""
    if len(data) < _LENGTH.size:
        return None
    (length,) = _LENGTH.unpack_from(data)
    if len(data) < _LENGTH.size + length:
        return None
    request: dict[str, object] = json.loads(data[_LENGTH.size:_LENGTH.size + length])
    return request


def _ask(path: str, argv: list[str]) -> tuple[socket.socket, int] | None:
    """Connect, send the request with our standard streams; (connection, engine pid), or
    None (the server refused, or did not answer in time: the reason goes to the log)."""
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.settimeout(_CONNECT_SECONDS)
    try:
        connection.connect(path)
        connection.settimeout(None)
        request = encode_request(argv, dict(os.environ), os.getcwd(), os.getpid())
        socket.send_fds(connection, [request], [0, 1, 2])
        answer = _read_line(connection, time.monotonic() + _ANSWER_SECONDS)
    except OSError as exc:
        connection.close()
        print(f"tfmw stand-in: no fork server at {path} ({exc}); starting the engine itself",
              file=sys.stderr, flush=True)
        return None
    word, _, value = answer.partition(" ")
    if word != "pid":
        connection.close()
        print(f"tfmw stand-in: {answer or 'no answer from the fork server'}; starting the "
              "engine itself", file=sys.stderr, flush=True)
        return None
    return connection, int(value)


def _read_line(connection: socket.socket, deadline: float | None) -> str:
    """One line from `connection` (stripped); what came before its end or the deadline."""
    data = b""
    while not data.endswith(b"\n"):
        left = None if deadline is None else deadline - time.monotonic()
        if (left is not None and left <= 0) or not select.select([connection], [], [], left)[0]:
            return ""
        chunk = connection.recv(256)
        if not chunk:
            return data.decode().strip()
        data += chunk
    return data.decode().strip()


def _mirror(connection: socket.socket, pid: int) -> None:
    """Relay signals to the engine until it ends, then end the same way."""
    def relay(signum: int, frame: object = None) -> None:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    for signum in _RELAYED:
        signal.signal(signum, relay)
    # The kernel named by the launch (it may have died before we started: see orphan_guard).
    launcher = int(os.environ.get(LAUNCHER_VARIABLE) or 0) or os.getppid()
    orphaned_at = None
    # Python retries the waits a relayed signal interrupts.
    while not select.select([connection], [], [], _WATCH_SECONDS)[0]:
        if orphaned_at is None and os.getppid() != launcher:
            orphaned_at = time.monotonic()
            relay(signal.SIGTERM)
        elif orphaned_at is not None and time.monotonic() - orphaned_at > _GRACE_SECONDS:
            relay(signal.SIGKILL)
    answer = _read_line(connection, time.monotonic() + _CONNECT_SECONDS)
    word, _, value = answer.partition(" ")
    status = int(value) if word == "exit" and value.lstrip("-").isdigit() else 1
    if status < 0:
        if -status not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
        time.sleep(1)   # the signal ends us first
        os._exit(128 - status)
    os._exit(status)


def main(argv: list[str]) -> None:
    path = os.environ.get(SOCKET_VARIABLE)
    asked = _ask(path, argv) if path else None
    if asked is not None:
        _mirror(*asked)
    os.environ.pop(SOCKET_VARIABLE, None)
    os.execv(sys.executable, [sys.executable, "-m", _engine_module(), *argv])


def _engine_module() -> str:
    """The engine's module, as worker_modules.py (this file's sibling) names it: a stand-in
    runs as a script (`python -I path`), outside the package, so it loads that file alone."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "worker_modules.py")
    spec = importlib.util.spec_from_file_location("_tfmw_worker_modules", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return str(module.ENGINE_MAIN)


if __name__ == "__main__":
    main(sys.argv[1:])
