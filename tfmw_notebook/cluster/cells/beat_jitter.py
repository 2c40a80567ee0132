"""How far apart the workers' heartbeats arrive at this cluster's size and load (pure).

Beats leave every HEARTBEAT_SECONDS, but a loaded host (16 TensorFlow processes on two
cores) schedules the thread that sends them late, and the controller forwards them late:
the gaps the notebook sees grow with the number of workers. The silence after which a
worker is looked at (liveness.SilenceWatch) has a floor (`TFCluster.silence`, counted in
beats that arrive on time); when a high quantile of the gaps measured on these workers
is later than ON_TIME beat periods, the floor is stretched by the same ratio, so the
limit follows what this cluster shows instead of a constant. The quantile leaves out
the rare long gap (a worker holding its GIL for a while): one such gap does not slow
down every later verdict.
"""

from __future__ import annotations

from collections import deque

from ...protocol.events import HEARTBEAT_SECONDS

GAPS_KEPT = 512    # the most recent gaps, all ranks together
QUANTILE = 0.95
ON_TIME = 1.5      # gaps up to this many periods are scheduling noise the floor covers
MIN_GAPS = 16      # fewer measured: the floor alone


class BeatJitter:
    """The gaps between consecutive beats of each rank, as the notebook received them."""

    def __init__(self, kept: int = GAPS_KEPT):
        self._gaps: deque[float] = deque(maxlen=kept)

    def add(self, seconds: float, beats: int) -> None:
        """`beats` new beats of one rank arrived `seconds` after its previous one.

        Several arrive at once when the notebook looked late (its loop drew a figure):
        each counts as an equal share of the wait, which the worker did not cause."""
        if beats > 0 and seconds >= 0:
            self._gaps.append(seconds / beats)

    def __len__(self) -> int:
        return len(self._gaps)

    def gap(self) -> float | None:
        """The QUANTILE of the gaps kept; None while fewer than MIN_GAPS are."""
        if len(self._gaps) < MIN_GAPS:
            return None
        ordered = sorted(self._gaps)
        return ordered[min(len(ordered) - 1, int(QUANTILE * len(ordered)))]

    def threshold(self, floor: float) -> float:
        """Seconds of silence after which a rank is looked at: at least `floor`."""
        gap = self.gap()
        late = 1.0 if gap is None else gap / (ON_TIME * HEARTBEAT_SECONDS)
        return floor * max(1.0, late)
