"""Before workers are restarted, the chief's checkpoint write under way is let end.

The chief writes the automatic checkpoints on a thread of its own while training goes
on (worker/writes/background_writes.py) and says when a write begins and ends. After an
interrupt or a failure the notebook restarts the workers at once (busy in the cell,
they get no signal): a write cut short then would lose an epoch the user saw saved.
So the restart waits for it, bounded; a chief that died or was lost is not waited for,
and a second interrupt goes on without it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from ...protocol.events import WRITING_KEY
from ..launch.limits import POLL_SECONDS

WRITE_END_SECONDS = 30.0   # a checkpoint of a notebook's model is written in well under that
_TELL_AFTER = 1.0          # a wait this long is said, not silent


def let_write_end(chief_data: Mapping[str, Any], chief_gone: Callable[[], bool],
                  tell: Callable[[str], Any], seconds: float = WRITE_END_SECONDS) -> bool:
    """Wait while the chief's published data says it is writing; True if the write ended
    (or none ran), False if the chief went, the time ran out or the user interrupted."""
    began = time.monotonic()
    told = False
    try:
        while chief_data.get(WRITING_KEY):
            waited = time.monotonic() - began
            if waited > seconds or _gone(chief_gone):
                return False
            if waited > _TELL_AFTER and not told:
                tell("tfdist: letting worker 0 finish writing its checkpoint before the "
                     "restart (interrupt again to restart without it)...")
                told = True
            time.sleep(POLL_SECONDS)
    except KeyboardInterrupt:
        return False
    return True


def _gone(chief_gone: Callable[[], bool]) -> bool:
    try:
        return chief_gone()
    except Exception:   # the controller cannot say where the chief is: nothing to wait for
        return True
