"""The cell watch's loop on its own (fake futures and controller): a rank that fails is
reported as the cell's failure, however its end falls between the watch's looks."""

from __future__ import annotations

import pytest
from tfmw_notebook.cluster.cells.cell_watch import CellWatch
from tfmw_notebook.cluster.cells.run_settings import RunSettings
from tfmw_notebook.cluster.cells.worker_calls import WorkerCalls
from tfmw_notebook.errors import WorkerFailed
from tfmw_notebook.protocol.tfconfig import EngineReport

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]


class RankFuture:
    """A rank's call: running until `end()`, then failed with `error` (or returned)."""

    def __init__(self, error: BaseException | None = None):
        self.error = error
        self.ended = False

    def end(self) -> None:
        self.ended = True

    def done(self) -> bool:
        return self.ended

    def exception(self) -> BaseException | None:
        return self.error if self.ended else None

    def wait(self, timeout: float) -> bool:
        return self.ended

    def wait_for_output(self, timeout: float) -> bool:
        return True


class Controller:
    """Every engine registered; `on_ask` runs as the watch asks which are."""

    def __init__(self, ids: list[int], on_ask):
        self.ids, self.on_ask = set(ids), on_ask

    def registered(self) -> set[int]:
        self.on_ask()
        return self.ids


def test_a_rank_that_fails_while_the_watch_asks_the_controller_fails_the_cell():
    # Both ranks end, one with an error, between the watch's look for errors and its
    # look for ranks still running: the cell fails with that error, not with a raw one.
    futures = [RankFuture(), RankFuture(NameError("name 'rate' is not defined"))]

    def both_end():
        for future in futures:
            future.end()

    workers = [EngineReport(engine_id=rank, host="another-host", address="198.18.0.9",
                            port=5000 + rank, pid=100 + rank) for rank in range(2)]
    watch = CellWatch(calls=WorkerCalls(Controller([0, 1], both_end), timeout=5),
                      workers=workers, settings=RunSettings(), error_grace=5)
    watch._published = [{"stdout": "", "stderr": "", "data": {}} for _ in workers]
    with pytest.raises(WorkerFailed) as failed:
        watch._watch(futures, None, None)
    assert failed.value.failure.kind == "error" and failed.value.failure.rank == 1
    assert failed.value.failure.all_finished
