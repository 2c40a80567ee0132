"""Worker side of the live dashboard: buffer training events and publish them.

The events and the publish-key scheme are defined in `tfmw_notebook.protocol.events`.
TensorFlow is imported only when the Keras callback is first needed, never when
this module loads.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from ...protocol.events import (
    DROPPED,
    EPOCH,
    REPORT,
    TRAIN_BEGIN,
    TRAIN_END,
    events_key,
    metric_values,
    new_events,
)

# The Keras callback that emits through an EventPublisher is in keras_reporting.py
# (it imports TensorFlow; this module does not).
__all__ = ["EventPublisher", "events_key", "new_events"]

# These mark a change the notebook should show at once; batch events can wait a little.
_URGENT_KINDS = frozenset({TRAIN_BEGIN, EPOCH, TRAIN_END, REPORT})


class EventPublisher:
    """Sends events through `publish(dict)`; batches are sent together, at most every
    `min_interval` seconds, anything else at once. Publishing never raises: a failure
    is counted (`errors`, `dropped_events`, `last_error`), the next publish that gets
    through tells the notebook how many events were lost, and training goes on."""

    def __init__(self, publish: Callable[[dict], Any], rank: int, min_interval: float = 0.25,
                 clock: Callable[[], float] = time.time):
        if min_interval < 0:
            raise ValueError(
                "Invalid value for argument `min_interval`. "
                f"Received: min_interval={min_interval!r}. Expected a number of seconds >= 0."
            )
        self._publish = publish
        self.rank = rank
        self.min_interval = min_interval
        self._clock = clock
        self._buffer: list[dict] = []
        self._last_flush = -float("inf")
        self.seq = 0
        self.errors = 0
        self.dropped_events = 0
        self._dropped_untold = 0        # lost since the last publish that got through
        self.last_error: BaseException | None = None

    def emit(self, kind_or_event: str | Mapping[str, Any], **fields: Any) -> None:
        """Queue an event: emit("batch", epoch=0, step=3, logs={...}) or emit({"kind": ...}).

        "rank" and "time" are filled in when missing.
        """
        if isinstance(kind_or_event, Mapping):
            event = dict(kind_or_event, **fields)
        else:
            event = dict(fields, kind=kind_or_event)
        now = self._clock()
        event.setdefault("rank", self.rank)
        event.setdefault("time", now)
        self._buffer.append(event)
        if event["kind"] in _URGENT_KINDS or now - self._last_flush >= self.min_interval:
            self.flush()

    def batch_due(self) -> bool:
        """Whether a batch event would go out now (the last publish is `min_interval` old).

        The Keras callback asks before it turns a batch's logs into numbers: that
        conversion waits for the step to finish on the device, so it is done only for
        the batches that are sent.
        """
        return self._clock() - self._last_flush >= self.min_interval

    def report(self, metrics: Mapping[str, Any], step: int | None = None,
               epoch: float | None = None) -> None:
        """A custom training loop's metrics for the dashboard."""
        self.emit(REPORT, step=step, epoch=epoch, metrics=metric_values(metrics))

    def flush(self) -> None:
        """Publish what is buffered, under the next fresh key."""
        if not self._buffer:
            return
        events, self._buffer = self._buffer, []
        if self._dropped_untold:
            # A field on an event it sends anyway: an older notebook just ignores it.
            events[-1] = dict(events[-1], **{DROPPED: self._dropped_untold})
        self._last_flush = self._clock()
        self.seq += 1
        try:
            self._publish({events_key(self.seq): events})
        except Exception as error:  # the dashboard is a nicety; training must go on
            self.errors += 1
            self.dropped_events += len(events)
            self._dropped_untold += len(events)
            self.last_error = error
        else:
            self._dropped_untold = 0

    __call__ = emit
