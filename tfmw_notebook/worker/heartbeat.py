"""While a cell runs, a worker tells the notebook every second that it is alive.

A worker on another host can vanish without its engine leaving the controller for
about 30 s (a controller the user started keeps ipyparallel's default heartbeat),
and a host cut off from the network cannot even be told apart from a slow one.
The beats travel like the dashboard's events (ipyparallel's data channel, through
the controller), from a thread of their own: TensorFlow releases the GIL in its
ops, so a worker busy training still beats; a stopped or unreachable one does not.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

from ..protocol.events import ALIVE_KEY, HEARTBEAT_SECONDS, WHERE_KEY
from .whereabouts import main_thread_whereabouts


class Heartbeat:
    """`with Heartbeat(publish):` beats until the block ends."""

    def __init__(self, publish: Callable[[dict], Any], period: float = HEARTBEAT_SECONDS,
                 check: Callable[[], Any] | None = None):
        self._publish = publish
        self._period = period
        self._check = check  # also run at every beat (controller_watch.check)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.beats = 0

    def __enter__(self) -> Heartbeat:
        self._beat()  # at once: the notebook counts silence from the cell's start
        self._thread = threading.Thread(target=self._run, name="tfdist-heartbeat", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self._period + 1.0)

    def _run(self) -> None:
        while not self._stop.wait(self._period):
            self._beat()
            if self._check is not None:
                self._check()

    def _beat(self) -> None:
        self.beats += 1
        with contextlib.suppress(Exception):  # a lost beat only makes the notebook look sooner
            self._publish({ALIVE_KEY: self.beats, WHERE_KEY: main_thread_whereabouts()})


def engine_publish() -> Callable[[dict], Any]:
    """ipyparallel's publish_data on an engine (it sends through a thread-safe socket)."""
    from ipyparallel.datapub import publish_data

    return publish_data
