"""A worker whose controller is gone ends itself, rather than train for nobody.

An ipyparallel engine cannot join a controller again, and one that lost its
controller (the controller died, or this host was cut off from it) keeps running
the cell it had, then waits minutes for ipyparallel's own heartbeat check. While
a cell runs, each heartbeat (heartbeat.py) also checks that the controller still
accepts connections; after LIMIT seconds without, the engine exits. The watch is
on only if the controller was reachable directly when the worker was set up
(engines behind an SSH tunnel, say, cannot probe it). Engines in a private
network (private_network.py) probe the Unix socket they registered at. A cell that
ends while the controller does not answer leaves the watch on until it answers or
the engine ends (`watch_on_after_cell`): a fit that ended first left it idle.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

LIMIT_SECONDS = 12.0
_PROBE_SECONDS = 2.0
_AFTER_CELL_PERIOD = 1.0   # seconds between checks once the cell has ended


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


def watch_on_after_cell(period: float = _AFTER_CELL_PERIOD,
                        now: Callable[[], float] = time.monotonic,
                        end: Callable[[int], object] = os._exit) -> threading.Thread | None:
    """At a cell's end: if the controller did not answer at the last check, go on
    checking on a thread of its own until it answers or LIMIT_SECONDS pass (the engine
    then ends). Without it an engine whose fit ended before the limit waited idle for
    ipyparallel's own heartbeat check, minutes later (seen in a test on a fast machine)."""
    if _watch.address is None or _watch.unreachable_since is None:
        return None
    thread = threading.Thread(target=_watch_until_answered, args=(period, now, end),
                              name="tfdist-controller-watch", daemon=True)
    thread.start()
    return thread


def _watch_until_answered(period: float, now: Callable[[], float],
                          end: Callable[[int], object]) -> None:
    while _watch.unreachable_since is not None:
        time.sleep(period)
        check(now, end)
