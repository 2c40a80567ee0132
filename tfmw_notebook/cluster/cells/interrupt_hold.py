"""One interrupt held back while fresh workers start, so a second press does not lose them.

After a failure (an interrupt among them) the cluster kills its workers and starts fresh
ones, which takes seconds: TensorFlow's import alone is 2.5 s with tf-keras and 3.8 s with
Keras 3 here. A user who presses interrupt again meanwhile, or a front end that repeats it,
used to stop that restart half way and leave the cluster without workers. Now the first
press during the restart is held (a line says so) and the restart goes on; a second press
gives up on it, as before.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_held = [0]   # presses held so far in this process


def presses_held() -> int:
    """How many presses were held so far: a sweep ends when one came during its trial."""
    return _held[0]


@contextmanager
def one_interrupt_held(what: str) -> Iterator[None]:
    """While inside, the first SIGINT prints a line and is ignored; the next raises
    KeyboardInterrupt. Signals reach the main thread only: elsewhere nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    presses = 0

    def on_interrupt(signum, frame):
        nonlocal presses
        presses += 1
        if presses > 1:
            raise KeyboardInterrupt
        _held[0] += 1
        sys.stderr.write(f"tfdist: {what}; interrupt again to stop without them\n")
        sys.stderr.flush()

    previous = signal.signal(signal.SIGINT, on_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous if previous is not None
                      else signal.default_int_handler)
