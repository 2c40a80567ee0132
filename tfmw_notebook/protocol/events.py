"""The training-event protocol between the workers and the notebook.

Both sides import this module, so it imports neither TensorFlow nor IPython.

Every event is a dict with "kind", "rank" and "time" (time.time() on the worker),
plus the fields of its kind:

    train_begin  epochs, steps (None if unknown), mode ("fit" or "evaluate"),
                 running_means (optional: batch logs are means since the epoch began,
                 as Keras' own train_step makes them)
    batch        epoch, step (both 0-based), logs; not every batch is sent (at most
                 a few a second), so a receiver must not count them
    epoch        epoch (0-based), logs, samples (optional: samples this worker saw),
                 steps (optional: steps done in that epoch)
    train_end    logs (optional; the results of an evaluate run)
    report       step, epoch (None or float), metrics    (custom training loops)

Any event may also carry "dropped": how many of its worker's events were lost
(their publish failed) since the last batch of events that arrived. Receivers
ignore kinds and fields they do not know, so newer workers can talk to an older
notebook.

Transport: a worker publishes through ipyparallel's `publish_data`, and the client
*merges* every published dict into one dict per engine (dict.update), so a key
published twice keeps only its last value. Each publish therefore goes out under a
fresh key, `events_key(seq)` = "tfmw-events-<seq>" with seq = 1, 2, 3, ..., holding a
list of events; `new_events` on the client takes the keys it has not read yet, in order.

Liveness: while a cell runs, each worker also publishes ALIVE_KEY = a count that
grows every HEARTBEAT_SECONDS, so the notebook can tell a worker that went silent
(a host down or cut off) from one that is merely slow. Each beat also says where the
worker's main thread is (WHERE_KEY): inside TensorFlow/Keras (FRAMEWORK) or at a line
of the user's own code, so a worker stuck in its own code can be told from the others
waiting for it in a collective. While a checkpoint is written off the training thread,
WRITING_KEY says so.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

TRAIN_BEGIN = "train_begin"
BATCH = "batch"
EPOCH = "epoch"
TRAIN_END = "train_end"
REPORT = "report"

FIT = "fit"
EVALUATE = "evaluate"

COMMON_FIELDS = ("kind", "rank", "time")
KIND_FIELDS: dict[str, tuple[str, ...]] = {
    TRAIN_BEGIN: ("epochs", "steps", "mode", "running_means"),
    BATCH: ("epoch", "step", "logs"),
    EPOCH: ("epoch", "logs", "samples", "steps"),
    TRAIN_END: ("logs",),
    REPORT: ("step", "epoch", "metrics"),
}
DROPPED = "dropped"

ALIVE_KEY = "tfmw-alive"
WHERE_KEY = "tfmw-where"        # with each beat: FRAMEWORK, or where in the user's code
FRAMEWORK = "framework"
HEARTBEAT_SECONDS = 1.0
# True while the worker's writer thread writes a checkpoint (worker/writes/background_writes.py):
# the notebook lets that write end before it restarts the workers.
WRITING_KEY = "tfmw-writing"

EVENTS_KEY_PREFIX = "tfmw-events-"
_EVENTS_KEY = re.compile(re.escape(EVENTS_KEY_PREFIX) + r"(\d+)\Z")


def events_key(seq: int) -> str:
    """The key of the `seq`-th publish of one worker (seq counts from 1)."""
    return f"{EVENTS_KEY_PREFIX}{seq}"


def new_events(data: Mapping[str, Any] | None,
               last_seq: int = 0) -> tuple[list[dict[str, Any]], int]:
    """Events in one engine's published data that come after `last_seq`, in order.

    Returns (events, the highest seq read); pass that seq back in on the next poll.
    Keys that are not ours (a user's own publish_data) are left alone.
    """
    fresh = []
    for key in list(data or {}):  # a snapshot: the client fills `data` from another thread
        match = _EVENTS_KEY.match(key) if isinstance(key, str) else None
        if match and int(match.group(1)) > last_seq:
            fresh.append(int(match.group(1)))
    events: list[dict[str, Any]] = []
    for seq in sorted(fresh):
        events.extend((data or {})[events_key(seq)])
    return events, max(fresh, default=last_seq)


class EventReader:
    """One engine's events as they arrive, poll after poll, each poll costing the keys it
    reads rather than every key the engine ever published (the notebook polls each rank
    twenty times a second, and a cell's keys number in the hundreds).

    The publisher's keys are consecutive; the next ones are looked up by name. A key that
    does not follow (a publish lost on its way, a key of the user's) shows as `data`
    holding more keys than were accounted for: then one full scan (`new_events`) takes
    whatever came after the last seq read, past any gap.
    """

    def __init__(self) -> None:
        self.seq = 0             # the highest seq read
        self._accounted = 0      # keys of `data` read, or seen not to be events

    def read(self, data: Mapping[str, Any] | None) -> list[dict[str, Any]]:
        if not data:
            return []
        events: list[dict[str, Any]] = []
        while (key := events_key(self.seq + 1)) in data:
            events.extend(data[key])
            self.seq += 1
            self._accounted += 1
        # Read after the lookups: a key that came in meanwhile costs one scan, not a miss.
        size = len(data)
        if size > self._accounted:
            keys = list(data)    # a snapshot: the client fills `data` from another thread
            later, self.seq = new_events({key: data[key] for key in keys}, self.seq)
            events.extend(later)
            self._accounted = len(keys)
        return events


def metric_value(value: Any) -> float | None:
    """`value` as a plain float, or None when it is not a single number.

    Numbers are Python ints and floats, numpy scalars and 0-d arrays, and scalar
    tensors or anything else with `__float__` and no dimensions. Strings (even
    "0.5"), None, containers and arrays of any other shape are not numbers. NaN and
    infinities are kept: a diverging loss is worth seeing.
    """
    if isinstance(value, (str, bytes)) or getattr(value, "ndim", 0) != 0:
        return None
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        return None


def metric_values(values: Mapping[str, Any] | None) -> dict[str, float]:
    """A copy of `values` (Keras logs, reported metrics) holding only numbers, as floats.

    Names become strings; values that are not numbers (see `metric_value`) are left out.
    """
    numbers = {}
    for name, value in (values or {}).items():
        number = metric_value(value)
        if number is not None:
            numbers[str(name)] = number
    return numbers
