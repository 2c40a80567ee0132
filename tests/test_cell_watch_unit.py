"""The cell watch's loop on its own (fake futures and controller): a rank that fails is
reported as the cell's failure, however its end falls between the watch's looks."""

from __future__ import annotations

import time

import pytest
from tfmw_notebook.cluster.cells.cell_watch import CellWatch
from tfmw_notebook.cluster.cells.run_settings import RunSettings
from tfmw_notebook.cluster.cells.worker_calls import WorkerCalls
from tfmw_notebook.cluster.launch.limits import POLL_SECONDS
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


class SlowRank(RankFuture):
    """A rank whose call never ends: each wait lasts its whole timeout."""

    def wait(self, timeout: float) -> bool:
        time.sleep(timeout)
        return False


def _watch_on(futures, controller) -> CellWatch:
    workers = [EngineReport(engine_id=rank, host="another-host", address="198.18.0.9",
                            port=5000 + rank, pid=100 + rank) for rank in range(len(futures))]
    watch = CellWatch(calls=WorkerCalls(controller, timeout=5), workers=workers,
                      settings=RunSettings(), error_grace=5)
    watch._published = [{"stdout": "", "stderr": "", "data": {}} for _ in workers]
    return watch


def test_a_quick_cell_on_many_ranks_is_not_checked_for_dead_ones_at_every_reply():
    # Each rank's reply wakes the watch: a look at every process per reply cost a trivial
    # cell on 8 workers 8 ms (each look reads /proc), so looks come at most every
    # POLL_SECONDS, and a cell over before the first one needs none.
    class EndsOneAtEachWait(RankFuture):
        def wait(self, timeout: float) -> bool:
            next(f for f in futures if not f.done()).end()
            return self.ended

    futures = [EndsOneAtEachWait() for _ in range(8)]
    asked = []
    watch = _watch_on(futures, Controller(range(8), lambda: asked.append(1)))
    watch._watch(futures, None, None)
    assert all(f.done() for f in futures) and asked == []


def test_an_engine_that_left_the_hub_is_named_within_a_few_looks():
    futures = [RankFuture(), SlowRank()]
    futures[0].end()
    controller = Controller([0], lambda: None)   # engine 1 is gone
    watch = _watch_on(futures, controller)
    began = time.monotonic()
    with pytest.raises(WorkerFailed) as failed:
        watch._watch(futures, None, None)
    assert failed.value.failure.rank == 1 and "died" in failed.value.failure.summary
    assert time.monotonic() - began < 5 * POLL_SECONDS
