"""One engine's reply to a call sent to several at once, read straight off ipyparallel's
message future for that engine.

ipyparallel's AsyncResult per engine (what `AsyncResult.split()` makes) builds three
events, three combined futures and their callbacks, and the client's I/O thread runs them
at each reply: for the 12 engines of a trivial cell that was about 1 ms of the notebook's
CPU (measured: 5.75 ms against 4.79 ms for the bare broadcast), and cyclic garbage that
the notebook's full collections then walk (400 trivial cells on 4 workers: 4 full
collections, 1.3 s in all, against 2 and 0.3 s with these replies). The watch needs
less: whether the engine is done, its error, its output and data as they grow (the
metadata ipyparallel fills in), and its value.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable, Sequence
from typing import Any

from ipyparallel import error


class EngineReply:
    """The reply of one engine to a broadcast call (`child`: ipyparallel's MessageFuture
    for that engine's message), with the AsyncResult methods the cell watch uses."""

    __slots__ = ("_child", "engine_id")

    def __init__(self, child, engine_id: int | None = None):
        self._child = child
        self.engine_id = engine_id

    @property
    def metadata(self):
        """ipyparallel's metadata of the call on this engine: stdout, stderr, data..."""
        return self._child.output.metadata

    def done(self) -> bool:
        return self._child.done()

    def add_done_callback(self, callback: Callable[[EngineReply], Any]) -> None:
        """`callback(self)` once the reply came (on the client's I/O thread, or at once)."""
        self._child.add_done_callback(lambda _: callback(self))

    def exception(self) -> BaseException | None:
        """The engine's error (a RemoteError, or an EngineError when it died); None while
        it runs or when it returned a value."""
        if not self._child.done():
            return None
        failed = self._child.exception()
        if failed is not None:
            return failed
        value = self._child.result()
        return value if isinstance(value, Exception) else None

    def wait(self, timeout: float | None = None) -> bool:
        """Wait up to `timeout` seconds (None or < 0: no limit) for the reply; whether it came."""
        return self._child.wait(None if timeout is None or timeout < 0 else timeout)

    def wait_for_output(self, timeout: float | None = None) -> bool:
        """Wait for the reply and the end of the engine's output (they travel on different
        sockets); whether both came within `timeout` seconds (None or < 0: no limit)."""
        if self._child.done() and self._child.output.done():
            return True
        limit = None if timeout is None or timeout < 0 else timeout
        done, _ = concurrent.futures.wait([self._child, self._child.output], limit)
        return len(done) == 2

    def get(self, timeout: float | None = None) -> Any:
        """The engine's value; its error raised; ipyparallel's TimeoutError after `timeout`."""
        if not self.wait(timeout):
            raise error.TimeoutError("Result not ready.")
        failed = self.exception()
        if failed is not None:
            raise failed
        return self._child.result()


def turn_signal(replies: Sequence[Any]) -> threading.Event | None:
    """An event set when one of `replies` fails, and when the last of them comes: what a
    watch of the replies must turn for at once (the other replies change nothing it has to
    act on before its next look). None when they cannot tell (no `add_done_callback`).

    Waking at each reply made a trivial cell on 12 workers take 3-4 turns of the watch, each
    a look at every rank; the watch clears the event at each turn."""
    if not all(hasattr(reply, "add_done_callback") for reply in replies):
        return None
    signal, lock, pending = threading.Event(), threading.Lock(), [len(replies)]

    def came(reply) -> None:
        with lock:
            pending[0] -= 1
            last = pending[0] == 0
        if last or reply.exception() is not None:
            signal.set()

    for reply in replies:
        reply.add_done_callback(came)
    return signal
