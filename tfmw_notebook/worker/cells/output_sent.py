"""Before a cell's reply leaves a worker, what the cell printed has left it first.

An engine's stdout and stderr go out through ipykernel's I/O thread; the engine
flushes them before its reply, but gives up waiting after the stream's
`flush_timeout` (10 s). When that thread is held longer (a busy, starved machine),
the stream's message is queued behind the engine's "idle" status: ipyparallel then
takes the output as complete and drops the text that comes after it (measured: a
cell's last lines were lost on both workers). Waiting, with a longer deadline, for a
marker queued on that thread after the flush keeps the order.
"""

from __future__ import annotations

import sys
import threading

OUTPUT_SENT_SECONDS = 120.0


def wait_for_output_sent(deadline: float = OUTPUT_SENT_SECONDS) -> bool:
    """Flush stdout and stderr and wait until the I/O thread has taken the flush in.

    True when it did (or there is no such thread: plain streams wrote at once);
    False when `deadline` seconds passed first (the reply then goes anyway).
    """
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    # Both streams share the engine's one I/O thread.
    pub_thread = getattr(sys.stdout, "pub_thread", None) or getattr(sys.stderr, "pub_thread", None)
    thread = getattr(pub_thread, "thread", None)
    if (pub_thread is None or thread is None or not thread.is_alive()
            or thread is threading.current_thread()):
        return True
    # The I/O thread runs what is scheduled in order: once this marker has run, the
    # flushes queued before it have queued their messages, ahead of the reply's status.
    taken_in = threading.Event()
    pub_thread.schedule(taken_in.set)
    return taken_in.wait(deadline)
