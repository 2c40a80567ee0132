"""The cell watch's loop on its own (fake futures and controller): a rank that fails is
reported as the cell's failure, however its end falls between the watch's looks."""

from __future__ import annotations

import os
import socket
import time

import pytest
from tfmw_notebook.cluster.cells.cell_watch import CellWatch
from tfmw_notebook.cluster.cells.run_settings import RunSettings
from tfmw_notebook.cluster.cells.worker_calls import WorkerCalls
from tfmw_notebook.cluster.launch.limits import POLL_SECONDS
from tfmw_notebook.errors import WorkerFailed
from tfmw_notebook.protocol.events import ALIVE_KEY, FRAMEWORK, WHERE_KEY
from tfmw_notebook.protocol.run_options import StallLimits
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


class WaitingRank(RankFuture):
    """A rank waiting inside TensorFlow: its heartbeat says so at each of the watch's waits."""

    def __init__(self, data: dict):
        super().__init__()
        self.data = data

    def wait(self, timeout: float) -> bool:
        time.sleep(timeout)
        self.data[ALIVE_KEY] = self.data.get(ALIVE_KEY, 0) + 1
        self.data[WHERE_KEY] = FRAMEWORK
        return False


class AnsweringController(Controller):
    def controller_answers(self) -> bool:
        return True


def test_a_rank_silent_while_its_process_runs_and_the_others_wait_is_taken_for_hung():
    # Rank 1 never beats, yet its process runs (this one's: the probe reads its /proc entry):
    # busy, vouched for at every look. With rank 0 waiting for it, the cell ends at `hung`
    # seconds, as a lost worker, instead of waiting forever (seen: still running at 300 s).
    futures = [WaitingRank({}), RankFuture()]
    workers = [EngineReport(engine_id=rank, host=socket.gethostname(), address="127.0.0.1",
                            port=5000 + rank, pid=os.getpid()) for rank in range(2)]
    settings = RunSettings(stall=StallLimits(warning=None, hung=1.0))
    watch = CellWatch(calls=WorkerCalls(AnsweringController([0, 1], lambda: None), timeout=5),
                      workers=workers, settings=settings, error_grace=5, silence=0.3)
    watch._published = [{"stdout": "", "stderr": "", "data": futures[0].data},
                        {"stdout": "", "stderr": "", "data": {}}]
    began = time.monotonic()
    with pytest.raises(WorkerFailed) as failed:
        watch._watch(futures, None, None)
    failure = failed.value.failure
    assert failure.kind == "lost" and failure.rank == 1 and failure.retryable
    assert "heartbeat silent while its process runs" in failure.summary
    assert "taken for hung after 1 s" in failure.summary
    assert 1.0 <= time.monotonic() - began < 10.0


def test_stall_timeout_set_governs_a_silent_rank_too():
    assert StallLimits().hung == 180.0
    with pytest.raises(ValueError, match="Invalid value for argument `hung`"):
        StallLimits(hung=0)
    futures = [WaitingRank({}), RankFuture()]
    workers = [EngineReport(engine_id=rank, host=socket.gethostname(), address="127.0.0.1",
                            port=5000 + rank, pid=os.getpid()) for rank in range(2)]
    # A user who chose a stall timeout chose how long any stall may last, a silent one too.
    settings = RunSettings(stall=StallLimits(warning=None, timeout=1.5, hung=0.5))
    watch = CellWatch(calls=WorkerCalls(AnsweringController([0, 1], lambda: None), timeout=5),
                      workers=workers, settings=settings, error_grace=5, silence=0.3)
    watch._published = [{"stdout": "", "stderr": "", "data": futures[0].data},
                        {"stdout": "", "stderr": "", "data": {}}]
    with pytest.raises(WorkerFailed) as failed:
        watch._watch(futures, None, None)
    assert failed.value.failure.kind == "timeout" and failed.value.failure.rank == 1
    assert "StallLimits(timeout=1.5)" in failed.value.failure.summary
