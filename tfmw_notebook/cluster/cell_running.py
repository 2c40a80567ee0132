"""Running code on every worker: a cell, a function, or `diagnose`'s timed steps.

`CellRunning` is TFCluster's base: each attempt of a cell is watched (cell_watch.py);
after a failed one the workers are kept or brought back (recovery.py) and, as
--max-restarts allows, the cell runs again. It holds no state of its own; TFCluster
sets the workers and what a watch is tuned with.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, cast

from ..errors import BadArgument, WorkerFailed
from ..protocol.run_options import CellOptions, FitState
from ..protocol.tfconfig import EngineReport
from ..widgets.metrics import MetricsStore
from .cells.beat_jitter import BeatJitter
from .cells.cell_syntax import CellSource, checked_source
from .cells.cell_watch import CellWatch, RunResult
from .cells.recovery import Recovery, WorkerGroup, notice
from .cells.run_settings import RunSettings
from .cells.state_log import KeptState, StateLog, merge_fit_records
from .cells.worker_calls import WorkerCalls, diagnose_cell
from .diagnosis import Diagnosis, WorkerTimings
from .function_calls import run_function
from .runs.run_history import metrics_of

DEFAULT_STEPS = 20   # steps each part of `diagnose` is timed over
# Within this long of a cell's last reply the next cell skips the connect to the controller
# that checks it lives: those replies came through it (see `_check_workers`).
REPLIES_FRESH_SECONDS = 1.0


class CellRunning:
    """TFCluster's base for `run` and `diagnose`; TFCluster sets what is declared here."""

    workers: list[EngineReport]          # index = rank
    kept: KeptState
    restore_state: bool
    error_grace: float
    silence: float
    beat_jitter: BeatJitter
    _running: str | None                 # the first line of the cell running, if any
    _replied_at = float("-inf")          # when a cell's replies last all came back
    _history: MetricsStore | None
    calls: WorkerCalls
    chief_id: int
    state_log: StateLog
    _require_workers: Callable[[], None]
    push: Callable[[dict[str, Any]], None]
    pull: Callable[..., dict[str, Any]]

    def run(self, source: str | CellSource | Callable, *args,
            settings: RunSettings | None = None, **kwargs) -> Any:
        """Run a cell's code (returns a RunResult) or `fn(*args, **kwargs)` (returns the chief's
        value: function_calls.py) on every worker inside the strategy's scope, as `settings`
        say; WorkerFailed after keeping or restarting the workers (recovery.py)."""
        if callable(source):
            return run_function(self, source, args, kwargs, _settings(settings, {}))
        settings = _settings(_code_settings(args, settings), kwargs)
        self._check_workers()
        return self._run_cell(checked_source(source), settings)

    def _check_workers(self) -> None:
        """`_require_workers`, whose TCP connect to the controller (one for every cell of a
        notebook run top to bottom) is left out while the last cell's replies are fresh:
        they came through that controller. One that ended since is still found, by the
        watch: its cell is not heard from, and then the controller is probed."""
        if self.workers and time.monotonic() - self._replied_at < REPLIES_FRESH_SECONDS:
            return
        self._require_workers()

    def _run_cell(self, cell: CellSource, settings: RunSettings) -> RunResult:
        restore = self.restore_state if settings.restore is None else settings.restore
        restarts = 0
        while True:
            try:
                result = self.run_once(cell.text, settings, self.kept.next_cell())
            except WorkerFailed as attempt:
                # --max-restarts needs the earlier cells' names to run this one again.
                failure = Recovery(cast(WorkerGroup, self)).recover(   # self: a TFCluster
                    attempt, replay=restore or settings.max_restarts > 0)
                if not (failure.recovered and failure.retryable
                        and restarts < settings.max_restarts):
                    raise failure from None
                restarts += 1
                notice(f"tfdist: restart {restarts} of {settings.max_restarts} after: "
                       f"{failure.summary}; running the cell again")
                continue
            if settings.record:
                self.state_log.add_cell(cell.text, merge_fit_records(result.fits))
            self._history = metrics_of(result) or self._history
            return result

    def run_once(self, source: str, settings: RunSettings, state: FitState) -> RunResult:
        """One attempt of a cell: its result, or WorkerFailed (no recovery here)."""
        watch = CellWatch(self.calls, self.workers, settings, self.error_grace,
                          silence=self.silence, jitter=self.beat_jitter)
        self._running = source.strip().splitlines()[0][:60] if source.strip() else ""
        try:
            result = watch.run(source, state)
        finally:
            self._running = None
        self._replied_at = time.monotonic()
        return result

    def diagnose(self, *, model: str | None = None, data: str | None = None,
                 batch_size: int | None = None, steps: int = DEFAULT_STEPS) -> Diagnosis:
        """Where a training step's time goes, measured on the workers (diagnosis.py):
        for the model and data of the last fit(), or the workers' variables named."""
        self._require_workers()
        _check_diagnose_arguments(model, data, batch_size, steps)
        problem = self.calls.diagnose_problem(self.chief_id, model, data)
        if problem:
            raise BadArgument(problem)
        self.run(diagnose_cell(model, data, batch_size, steps), want_display=False,
                 record=False, options=CellOptions())
        rows = self.calls.diagnose_results([w.engine_id for w in self.workers])
        return Diagnosis(tuple(WorkerTimings.from_worker(rank, row)
                               for rank, row in enumerate(rows)))


def _code_settings(args: tuple, settings: RunSettings | None) -> RunSettings | None:
    """`cluster.run(source, settings)` or `cluster.run(source, settings=...)`."""
    if len(args) > 1 or (args and settings is not None):
        raise BadArgument("cluster.run(source, settings): give `settings` once; "
                          "arguments are for a function: cluster.run(fn, *args, **kwargs)")
    return args[0] if args else settings


def _settings(settings: RunSettings | None, fields: dict) -> RunSettings:
    if settings is not None and fields:
        raise BadArgument(f"give either `settings` or its fields ({', '.join(fields)}), "
                          "not both")
    if settings is None:
        try:
            return RunSettings(**fields)
        except TypeError as exc:  # a keyword RunSettings does not have
            raise BadArgument(f"{exc}; the fields are those of RunSettings") from None
    if not isinstance(settings, RunSettings):
        raise BadArgument(f"Invalid value for argument `settings`. Received: "
                          f"settings={settings!r}. Expected a RunSettings")
    return settings


def _check_diagnose_arguments(model, data, batch_size, steps) -> None:
    for name, value in (("model", model), ("data", data)):
        if value is not None and not (isinstance(value, str) and value.isidentifier()):
            raise BadArgument(f"Invalid value for argument `{name}`. Received: {name}={value!r}. "
                              "Expected the name of a variable on the workers")
    for name, value in (("batch_size", batch_size), ("steps", steps)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 1):
            raise BadArgument(f"Invalid value for argument `{name}`. Received: {name}={value!r}. "
                              "Expected an integer >= 1")
