"""Whether a worker whose heartbeat went silent still runs: busy, gone, stopped or
out of reach.

The heartbeat (worker/liveness/heartbeat.py) is a Python thread. A worker whose main thread
holds the GIL (a C call that keeps it, a long trace on a loaded machine) cannot beat,
yet it is alive and will go on: it must not be taken for a lost one. So before a
silent worker is called lost, its process is looked at:

- on this host, its pid: running or sleeping is busy; stopped (SIGSTOP, a debugger)
  or ended is not;
- on another host, its TensorFlow server: gRPC's own threads answer an HTTP/2
  greeting without the GIL, so a SETTINGS frame back means the process runs; a
  refused connection means the host is up and the process gone; a connection that
  gets no greeting means the process is stopped or hung; no connection at all
  means the host is down or cut off from this one.
"""

from __future__ import annotations

import socket
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Literal

from ...protocol.tfconfig import EngineReport
from ..launch.engines import is_this_host, pid_alive

Verdict = Literal["busy", "gone", "stopped", "unreachable"]
CONNECT_SECONDS = 1.0   # for the host to accept a connection (its kernel answers)
GREETING_SECONDS = 2.0  # then for gRPC's threads to greet back (the process must run)

# HTTP/2's client connection preface, then an empty SETTINGS frame (RFC 9113 3.4).
_CLIENT_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
_FRAME_HEADER = 9
_SETTINGS = 4


def judge(worker: EngineReport) -> Verdict:
    """What became of a worker not heard from (see the module's docstring)."""
    if is_this_host(worker.host):
        return _local_verdict(worker.pid)
    return grpc_verdict(worker.address, worker.port)


def judge_all(workers: list[EngineReport]) -> list[Verdict]:
    """judge() of each worker, probed side by side (each host cut off costs a timeout)."""
    if len(workers) <= 1:
        return [judge(worker) for worker in workers]
    with ThreadPoolExecutor(max_workers=min(len(workers), 16)) as pool:
        return list(pool.map(judge, workers))


def _local_verdict(pid: int) -> Verdict:
    if not pid_alive(pid):
        return "gone"
    return "stopped" if process_state(pid) in ("T", "t") else "busy"


def process_state(pid: int) -> str | None:
    """The one-letter state of a process of this host (R, S, D, T, ...); None if unknown."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            # The state follows the parenthesised command name.
            return stat.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def grpc_verdict(address: str, port: int, connect: float = CONNECT_SECONDS,
                 greeting: float = GREETING_SECONDS) -> Verdict:
    """Greet the TensorFlow server at address:port in HTTP/2 and judge by its answer."""
    try:
        connection = socket.create_connection((address, port), timeout=connect)
    except ConnectionRefusedError:
        return "gone"
    except OSError:
        return "unreachable"
    with connection:
        try:
            connection.sendall(_CLIENT_PREFACE)
            return "busy" if _server_greets(connection, greeting) else "stopped"
        except ConnectionError:
            return "gone"      # accepted by the kernel, then reset: the process ended
        except OSError:
            return "stopped"   # the host took the connection; the process did not answer


def _server_greets(connection: socket.socket, timeout: float) -> bool:
    """Whether the first frame the server sends within `timeout` is a SETTINGS frame."""
    deadline = time.monotonic() + timeout
    header = b""
    while len(header) < _FRAME_HEADER:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        connection.settimeout(left)
        chunk = connection.recv(_FRAME_HEADER - len(header))
        if not chunk:
            return False
        header += chunk
    return header[3] == _SETTINGS
