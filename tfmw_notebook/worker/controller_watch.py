"""A worker whose controller is gone ends itself, rather than train for nobody.

An ipyparallel engine cannot join a controller again, and one that lost its
controller (the controller died, or this host was cut off from it) keeps running
the cell it had, then waits minutes for ipyparallel's own heartbeat check. While
a cell runs, each heartbeat (heartbeat.py) also checks that the controller still
accepts connections; after LIMIT seconds without, the engine exits. The watch is
on only if the controller was reachable directly when the worker was set up
(engines behind an SSH tunnel, say, cannot probe it). Engines in a private
network (private_network.py) probe the Unix socket they registered at.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

LIMIT_SECONDS = 12.0
_PROBE_SECONDS = 2.0


@dataclass
class Watch:
    """The controller this worker watches, if any, and since when it has not answered."""

    address: tuple[str, int | None] | None = None   # (host, port), or (socket path, None)
    unreachable_since: float | None = None          # on the `check` clock


_watch = Watch()


def reachable(host: str, port: int | None) -> bool:
    """Whether (host, port) accepts a connection; (path, None) is a Unix socket."""
    try:
        if port is None:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
                probe.settimeout(_PROBE_SECONDS)
                probe.connect(host)
            return True
        with socket.create_connection((host, port), timeout=_PROBE_SECONDS):
            return True
    except OSError:
        return False


def install(host: str | None, port: int | None) -> bool:
    """Watch this controller from now on, if it can be reached from here."""
    if host and (port or host.startswith("/")) and reachable(host, port):
        _watch.address = (host, port)
    else:
        _watch.address = None
    _watch.unreachable_since = None
    return _watch.address is not None


def check(now: Callable[[], float] = time.monotonic,
          end: Callable[[int], object] = os._exit) -> None:
    """Called with every heartbeat while a cell runs."""
    address = _watch.address
    if address is None:
        return
    if reachable(*address):
        _watch.unreachable_since = None
        return
    since = _watch.unreachable_since = _watch.unreachable_since or now()
    if now() - since >= LIMIT_SECONDS:
        where = address[0] if address[1] is None else f"{address[0]}:{address[1]}"
        sys.stderr.write(f"tfdist worker on {socket.gethostname()}: the controller at "
                         f"{where} has not answered for "
                         f"{now() - since:.0f} s; this engine ends\n")
        sys.stderr.flush()
        end(3)
