"""The `tfdist` object a cell sees on every worker: who am I, and report()."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ...protocol.events import metric_values


@dataclass
class WorkerContext:
    """Rank, world size and chief flag of this worker, plus reporting.

    Ray Train users know this as `train.get_context()` plus `train.report()`.
    """

    rank: int
    world_size: int
    host: str
    tf_config: dict
    _publish: Callable[[dict], None] | None = field(default=None, repr=False)

    @property
    def is_chief(self) -> bool:
        # With a workers-only TF_CONFIG, worker 0 is the chief (it saves for all).
        return self.rank == 0

    def report(self, metrics: dict, *, step: int | None = None, epoch: float | None = None) -> None:
        """Send metrics from a custom training loop to the notebook's dashboard."""
        if not isinstance(metrics, dict):
            raise TypeError(
                f"report() takes a dict of metric values. Received: metrics={metrics!r}"
            )
        values = metric_values(metrics)
        if len(values) != len(metrics):
            bad = next(name for name in metrics if str(name) not in values)
            raise TypeError(f"report() takes numbers as metric values. Received: "
                            f"{bad}={metrics[bad]!r}")
        if self._publish is not None:
            self._publish(
                {"kind": "report", "rank": self.rank, "time": time.time(),
                 "step": step, "epoch": epoch, "metrics": values}
            )
