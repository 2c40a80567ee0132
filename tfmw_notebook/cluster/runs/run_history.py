"""The training metrics of a cluster's last run that trained: `cluster.history()`."""

from __future__ import annotations

from ...errors import TFDistError
from ...protocol.events import new_events
from ...widgets.metrics import MetricsStore
from ..cells.cell_watch import RunResult


def metrics_of(result: RunResult) -> MetricsStore | None:
    """The training events every rank published during the run, in one store (None:
    the run sent none, e.g. nothing trained or reporting was off)."""
    store = MetricsStore()
    for data in result.data:
        store.feed(new_events(data, 0)[0])
    return store if store.ranks else None


class RunHistory:
    """TFCluster's memory of the last run that trained (set after each successful run)."""

    _history: MetricsStore | None = None   # set by TFCluster.run

    def history(self) -> MetricsStore:
        """The metrics of the last run that trained, as `%tfdist history` shows them
        (widgets/metrics.py): `history(rank)` like Keras' History.history for one worker,
        `merged_history()` averaged over the workers, `summary()`."""
        if self._history is None:
            raise TFDistError("no training has been recorded yet: cluster.run() a function "
                              "or code that calls fit() or tfdist.report(), with "
                              "CellOptions(report=True) (the default)")
        return self._history
