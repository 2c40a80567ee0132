"""`--prune median`: a trial stops when, at an epoch, its monitored value is worse than
the median of the earlier trials' values at that epoch.

Pure. Earlier trials count when they reached that epoch (completed or pruned, as
Optuna's median pruner counts them); failed and interrupted trials do not (their
values never reached the notebook). With fewer than MIN_EARLIER values at an epoch
there is no threshold there: one earlier trial is too little to call a trial bad.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

MIN_EARLIER = 2


def thresholds(histories: Sequence[Sequence[float]]) -> tuple[float | None, ...]:
    """Per epoch (0-based), the median of the earlier trials' finite values, or None."""
    longest = max((len(history) for history in histories), default=0)
    result: list[float | None] = []
    for epoch in range(longest):
        values = [history[epoch] for history in histories
                  if epoch < len(history) and math.isfinite(history[epoch])]
        result.append(statistics.median(values) if len(values) >= MIN_EARLIER else None)
    return tuple(result)
