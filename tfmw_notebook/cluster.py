"""TFCluster: the Python API under the magics.

Starts or attaches an ipyparallel engine group, turns each engine into one
TensorFlow worker (TF_CONFIG handshake, then bootstrap), runs cells on all of
them, and brings the whole group back when one worker fails, because the
others would stay blocked in their collectives forever.
"""

from __future__ import annotations

import io
import itertools
import os
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from . import tfconfig
from .engines import EngineGroup, is_this_host, pid_alive
from .errors import ClusterSetupError, NoClusterError, TFDistError, WorkerFailed
from .output import OutputRelay
from .state_log import LoggedStep, RestoreReport, StateLog, merge_fit_records
from .tfconfig import EngineReport

COMMUNICATIONS = ("auto", "ring", "nccl")
# Errors a worker raises when a peer went away or a collective was aborted:
# worth a restart; anything else is the cell's own bug and is not retried.
RETRYABLE_ERRORS = frozenset({"UnavailableError", "AbortedError", "CancelledError",
                              "DeadlineExceededError"})
_POLL = 0.05
_DRAIN_SECONDS = 5.0
# After one rank raised, how long the others get to finish before they are taken
# to be blocked in a collective (then the group is restarted).
ERROR_GRACE = 3.0
_PROBE_SECONDS = 10.0
_cell_numbers = itertools.count(1)


@dataclass
class RunResult:
    """What a cell left behind: the chief's last value's display data, timings."""

    display: dict | None
    seconds: float
    data: list[dict] = field(default_factory=list)  # per rank: what the rank published
    fits: list[list[dict]] = field(default_factory=list)  # per rank: each fit's end state


class RemoteValue:
    """The chief's last expression value, shown as a normal cell result."""

    def __init__(self, display: dict):
        self._data = display["data"]
        self._metadata = display.get("metadata") or {}

    def _repr_mimebundle_(self, include=None, exclude=None):
        return self._data, self._metadata

    def __repr__(self) -> str:
        return self._data.get("text/plain", "")


class TFCluster:
    """A group of TensorFlow workers, one per ipyparallel engine.

    >>> cluster = TFCluster.start(2)
    >>> cluster.run("model.fit(...)")
    >>> cluster.stop()
    """

    def __init__(self, group: EngineGroup, *, communication: str = "auto",
                 gpus_per_worker: int = 0, timeout: float = 120.0):
        self._group = group
        self.communication = communication
        self.gpus_per_worker = gpus_per_worker
        self.timeout = timeout
        self.workers: list[EngineReport] = []  # index = rank
        self.tf_version = ""
        self.started_seconds = 0.0
        self.restarts = 0
        self._group_size = 0  # workers wanted, also while there are none
        # Pushes and successful cells that ran on the current workers, in order:
        # what a restart after a failure replays to give the workers their state.
        self._state = StateLog()
        self.restore_state = True   # keep end-of-fit state; restore after restarts
        self.error_grace = ERROR_GRACE
        self._state_dir: str | None = None
        self.last_restore: RestoreReport | None = None
        self._running: str | None = None

    # -- construction -------------------------------------------------------

    @classmethod
    def start(cls, n: int = 2, *, timeout: float = 120.0, communication: str = "auto",
              gpus_per_worker: int = 0, profile_dir: str | None = None) -> "TFCluster":
        """Start `n` local engines and make each a worker."""
        _check_settings(n, timeout, communication, gpus_per_worker)
        began = time.perf_counter()
        group = EngineGroup.start(n, timeout=timeout, profile_dir=profile_dir,
                                  environment=tfconfig.launch_environment(gpus_per_worker))
        return cls._bootstrapped(group, began, communication, gpus_per_worker, timeout)

    @classmethod
    def attach(cls, *, profile: str | None = None, cluster_id: str | None = None,
               url_file: str | None = None, n: int | None = None, timeout: float = 120.0,
               communication: str = "auto", gpus_per_worker: int = 0) -> "TFCluster":
        """Use the engines of an ipyparallel cluster that is already running."""
        _check_settings(n if n is not None else 1, timeout, communication, gpus_per_worker)
        began = time.perf_counter()
        group = EngineGroup.attach(profile=profile, cluster_id=cluster_id,
                                   url_file=url_file, n=n, timeout=timeout)
        return cls._bootstrapped(group, began, communication, gpus_per_worker, timeout)

    @classmethod
    def _bootstrapped(cls, group, began, communication, gpus_per_worker, timeout):
        cluster = cls(group, communication=communication,
                      gpus_per_worker=gpus_per_worker, timeout=timeout)
        try:
            cluster._make_workers()
        except BaseException:
            group.stop()
            raise
        cluster.started_seconds = time.perf_counter() - began
        cluster._group_size = cluster.size
        return cluster

    def _make_workers(self) -> None:
        """The TF_CONFIG handshake, then the bootstrap, waiting on every reply."""
        ids = self._group.ids
        client = self._group.client
        controller_host = _controller_host(client)
        replies = self._call_each(ids, "tfmw_notebook.worker.handshake", "describe_engine",
                                  [(controller_host,)] * len(ids), what="handshake")
        reports = [EngineReport(engine_id=eid, **reply) for eid, reply in zip(ids, replies)]
        try:
            reused = tfconfig.existing_workers(reports)
        except ValueError as exc:
            raise ClusterSetupError(str(exc)) from None
        if reused is not None:
            self.workers = reused
            self.tf_version = self._call_each([ids[0]], "tfmw_notebook.worker.bootstrap",
                                              "tensorflow_version", [()], what="lookup")[0]
            return
        ranked = tfconfig.order_ranks(reports)
        tfconfig.check_endpoints(ranked)
        self.workers = ranked
        settings = []
        for rank in range(len(ranked)):
            settings.append(({
                "rank": rank,
                "world_size": len(ranked),
                "env": tfconfig.worker_environment(ranked, rank,
                                                   gpus_per_worker=self.gpus_per_worker),
                "communication": self.communication,
            },))
        infos = self._call_each([r.engine_id for r in ranked], "tfmw_notebook.worker.bootstrap",
                                "bootstrap", settings, what="bootstrap")
        self.tf_version = infos[0]["tf_version"]

    def _call_each(self, ids, module, function, args_per_engine, *, what,
                   timeout: float | None = None) -> list:
        """Call module.function on each engine with its own args; all replies or an error."""
        client = self._group.client
        futures = [client[eid].apply_async(_call_worker_function, module, function, *args)
                   for eid, args in zip(ids, args_per_engine)]
        timeout = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        results = []
        for rank_or_index, future in enumerate(futures):
            remaining = max(0.0, deadline - time.monotonic())
            if not future.wait(remaining):
                raise ClusterSetupError(
                    f"engine {ids[rank_or_index]} did not finish the {what} within "
                    f"{timeout:g} s; raise --timeout or check that engine"
                )
            try:
                results.append(future.get())
            except Exception as exc:
                raise ClusterSetupError(
                    f"{what} failed on engine {ids[rank_or_index]}: {_remote_summary(exc)}"
                ) from None
        return results

    # -- running cells --------------------------------------------------------

    @property
    def size(self) -> int:
        return len(self.workers)

    def run(self, source: str, *, timeout: float | None = None, all_output: bool = False,
            want_display: bool = True, stdout=None, stderr=None,
            options: dict | None = None, max_restarts: int = 0, restore: bool | None = None,
            on_data: Callable[[int, dict], None] | None = None) -> RunResult:
        """Run `source` on every worker inside the shared strategy's scope.

        `options` say what the cell's Keras fit/evaluate calls get (see
        worker/keras_hooks.py): "report" sends their logs as events, which
        arrive in `on_data(rank, published_data)` while the cell runs;
        "checkpoint", "backup", "resume_from", "quiet_progress".

        Raises WorkerFailed if any worker raises or dies, on timeout, or on
        KeyboardInterrupt. When every worker finished the cell (each raised or
        returned) and they still agree on their collectives, the workers are
        kept as they are. Otherwise the group is restarted and, with `restore`
        (default: `self.restore_state`), the earlier cells are replayed
        quietly, each fit() giving back the state it ended with instead of
        training again. With `max_restarts`, a worker that dies or fails with
        a retryable error instead restarts and restores the group and runs the
        cell again (resuming from its automatic backup when
        `options["backup"]` is set).
        """
        if not isinstance(max_restarts, int) or max_restarts < 0:
            raise ValueError(f"Invalid value for argument `max_restarts`. Received: "
                             f"max_restarts={max_restarts!r}. Expected an integer >= 0")
        self._require_workers()
        compile(source, "<tfdist cell>", "exec")  # callers compile first; cheap guard
        restore = self.restore_state if restore is None else restore
        restarts = 0
        while True:
            options_now = dict(options or {}, **self._state_options())
            try:
                result = self._run_once(source, timeout=timeout, all_output=all_output,
                                        want_display=want_display, stdout=stdout, stderr=stderr,
                                        options=options_now, on_data=on_data)
            except _CellFault as fault:
                # --max-restarts needs the earlier cells' names to run this one again.
                failure = self._recover(fault, replay=restore or max_restarts > 0)
                if not (failure.recovered and failure.retryable and restarts < max_restarts):
                    raise failure from None
                restarts += 1
                _notice(f"tfdist: restart {restarts} of {max_restarts} after: "
                        f"{failure.summary}; running the cell again")
                continue
            self._state.add_cell(source, merge_fit_records(result.fits))
            return result

    def _state_options(self) -> dict:
        """Where the workers keep what each fit ended with (nothing if restore is off)."""
        if not self.restore_state:
            return {"state_dir": None}
        if self._state_dir is None:
            self._state_dir = tempfile.mkdtemp(prefix="tfmw-state-")
        return {"state_dir": self._state_dir, "cell_id": f"cell-{next(_cell_numbers)}"}

    def _run_once(self, source, *, timeout, all_output, want_display, stdout, stderr,
                  options, on_data) -> RunResult:
        filename = f"<tfdist-cell-{next(_cell_numbers)}>"
        client = self._group.client
        began = time.perf_counter()
        futures = [client[w.engine_id].apply_async(_call_worker_function,
                                                   "tfmw_notebook.worker.cell", "run_cell",
                                                   source, filename, want_display and rank == 0,
                                                   options)
                   for rank, w in enumerate(self.workers)]
        relay = OutputRelay(self.size, all_output=all_output, stdout=stdout, stderr=stderr)
        deadline = None if timeout is None else time.monotonic() + timeout
        self._running = source.strip().splitlines()[0][:60] if source.strip() else ""
        try:
            self._watch(futures, relay, deadline, timeout, on_data)
        finally:
            self._running = None
        outcomes = [future.get() for future in futures]
        return RunResult(display=outcomes[0]["display"], seconds=time.perf_counter() - began,
                         data=[dict(f.data) for f in futures],
                         fits=[outcome["fits"] for outcome in outcomes])

    def _watch(self, futures, relay, deadline, timeout, on_data) -> None:
        """Wait for every rank; raise _CellFault on the first that fails, dies or overruns.

        After a rank raised, the others get `error_grace` seconds to finish: if
        they all do, the workers may be kept; one still running is taken to be
        blocked in a collective that will never complete.
        """
        first_error, grace_ends = None, None
        try:
            while True:
                self._take_in(futures, relay, on_data)
                if first_error is None:
                    failed = next((r for r, f in enumerate(futures)
                                   if f.done() and f.exception()), None)
                    if failed is not None:
                        first_error = self._first_error(failed, futures, relay)
                        grace_ends = time.monotonic() + self.error_grace
                dead = self._dead_ranks()
                if dead:
                    raise self._death(dead)
                if all(f.done() for f in futures):
                    self._drain(futures, relay, on_data)
                    if first_error is not None:
                        raise self._error_fault(first_error, futures, all_finished=True)
                    return
                if first_error is not None and time.monotonic() > grace_ends:
                    raise self._error_fault(first_error, futures, all_finished=False)
                if deadline is not None and time.monotonic() > deadline:
                    raise _CellFault(f"the cell ran past --timeout {timeout:g} s; every "
                                     "worker was stopped", reason="timeout")
                futures[0].wait(_POLL)
        except KeyboardInterrupt:
            raise _CellFault("interrupted: training was stopped on every worker",
                             reason="interrupt") from None

    def _take_in(self, futures, relay, on_data) -> None:
        relay.poll(lambda r: (futures[r].stdout or "", futures[r].stderr or ""), self.size)
        if on_data is not None:
            for rank, future in enumerate(futures):
                on_data(rank, future.data)

    def _first_error(self, rank: int, futures, relay) -> tuple[int, BaseException]:
        """Show the first failing rank's traceback at once; remember it."""
        exc = futures[rank].exception()
        if _is_engine_death(exc):
            raise self._death([rank])
        relay.poll(lambda r: (futures[r].stdout or "", futures[r].stderr or ""), self.size)
        text = _remote_traceback(exc)
        if text:
            sys.stderr.write(_prefixed(text, rank))
            sys.stderr.flush()
        return rank, exc

    def _error_fault(self, first_error, futures, *, all_finished: bool) -> "_CellFault":
        rank, exc = first_error
        errors = [f.exception() for f in futures if f.done() and f.exception()]
        died = [r for r, f in enumerate(futures)
                if f.done() and f.exception() and _is_engine_death(f.exception())]
        if died:
            return self._death(died)
        ename = getattr(exc, "ename", "") or type(exc).__name__
        evalue = str(getattr(exc, "evalue", "") or "")
        return _CellFault(
            f"worker {rank} failed: {_remote_summary(exc)}", reason="error", rank=rank,
            traceback=_remote_traceback(exc), all_finished=all_finished,
            retryable=any(getattr(e, "ename", "") in RETRYABLE_ERRORS for e in errors),
            error_name=ename, error_value=evalue)

    def _death(self, ranks: list[int]) -> "_CellFault":
        names = ", ".join(f"{r} (pid {self.workers[r].pid} on {self.workers[r].host})"
                          for r in ranks)
        return _CellFault(f"worker {names} died", reason="died", rank=ranks[0], retryable=True)

    def _drain(self, futures, relay, on_data) -> None:
        """Take in what the workers printed or published just before they finished.

        Output and published data travel on another socket than the reply, so
        they can arrive after it; wait (briefly) for each rank's output to end.
        """
        deadline = time.monotonic() + _DRAIN_SECONDS
        for future in futures:
            future.wait_for_output(max(0.0, deadline - time.monotonic()))
        self._take_in(futures, relay, on_data)

    def _dead_ranks(self) -> list[int]:
        registered = self._group.registered()
        dead = []
        for rank, worker in enumerate(self.workers):
            if worker.engine_id not in registered:
                dead.append(rank)
            elif is_this_host(worker.host) and not pid_alive(worker.pid):
                dead.append(rank)
        return dead

    # -- after a failure: keep, or restart and restore --------------------------

    def _recover(self, fault: "_CellFault", *, replay: bool) -> WorkerFailed:
        """Keep the workers when that is safe, else restart them (and restore their state).

        The rule: keep them when every worker finished the cell (each raised or
        returned), none died, no error says a peer or a collective failed, the
        workers' collective counters agree and a test all-reduce succeeds.
        """
        detected = time.monotonic()
        details = dict(rank=fault.rank, traceback=fault.traceback, reason=fault.reason,
                       detected_at=detected, retryable=fault.retryable, summary=fault.message,
                       error_name=fault.error_name, error_value=fault.error_value)
        why_restart = ""
        if fault.all_finished and not fault.retryable:
            why_restart = self._why_not_keep()
            if not why_restart:
                return WorkerFailed(
                    f"{fault.message}. Every worker finished the cell, so the workers were "
                    "kept: names from earlier cells are still defined", kept=True, **details)
            why_restart = f" ({why_restart})"
        _notice(f"tfdist: {fault.message}; restarting the workers{why_restart}...")
        log = self._state.snapshot()
        try:
            if not self._group.can_restart():
                # Stuck in collectives, they are of no use: end them, then say why
                # no fresh ones come.
                self._group.kill({w.engine_id: (w.host, w.pid) for w in self.workers})
                self.workers = []
            self._replace_workers()
        except TFDistError as exc:
            return WorkerFailed(f"{fault.message}; the workers could not be restarted: {exc}",
                                **details)
        restarted = f"The workers were restarted in {self.last_restart_seconds:.1f} s"
        if not (replay and log):
            self._forget_state()
            return WorkerFailed(f"{fault.message}. {restarted}: their variables were reset, run "
                                "the cells that define them again", recovered=True, **details)
        report = self._restore(log)
        return WorkerFailed(f"{fault.message}. {restarted} and {report.line()}",
                            recovered=True, restored=report.line(), **details)

    def _why_not_keep(self) -> str:
        """Empty if the workers can go on together; else why they cannot."""
        ids = [w.engine_id for w in self.workers]
        module = "tfmw_notebook.worker.collectives"
        try:
            positions = self._call_each(ids, module, "position", [()] * len(ids),
                                        what="collective check", timeout=_PROBE_SECONDS)
            if any(position != positions[0] for position in positions):
                return "the workers ran different numbers of collectives"
            self._call_each(ids, module, "probe", [(_PROBE_SECONDS,)] * len(ids),
                            what="test all-reduce", timeout=_PROBE_SECONDS + 5)
        except ClusterSetupError as exc:
            return str(exc)
        return ""

    def _restore(self, log: list[LoggedStep]) -> RestoreReport:
        """Replay the logged pushes and cells on fresh workers, quietly and in order.

        Each replayed fit() gives back the state it ended with (worker/fit_state.py)
        and returns its History; a fit with no saved state trains again. A
        replayed cell that fails ends the restore there.
        """
        began = time.perf_counter()
        report = RestoreReport()
        quiet = io.StringIO()
        for step in log:
            if step.kind == "push":
                self.push(step.payload)
                continue
            options = {"quiet_progress": True, "state_dir": None,
                       "replay": [fit.for_worker() for fit in step.fits]}
            try:
                self._run_once(step.payload, timeout=None, all_output=False, want_display=False,
                               stdout=quiet, stderr=quiet, options=options, on_data=None)
            except _CellFault as fault:
                report.failed_cell, report.error = report.cells + 1, fault.message
                if not fault.all_finished or fault.retryable:
                    self._replace_workers()  # stuck or dead: fresh, without the rest
                break
            self._state.add(step)
            report.cells += 1
            report.fits_restored += sum(1 for fit in step.fits if fit.source)
            report.fits_rerun += sum(1 for fit in step.fits if not fit.source)
        report.seconds = time.perf_counter() - began
        self.last_restore = report
        _notice(f"tfdist: {report.line()}")
        return report

    # -- moving variables -------------------------------------------------------

    def push(self, namespace: dict[str, Any]) -> None:
        """Send notebook variables to every worker."""
        self._require_workers()
        view = self._group.client[[w.engine_id for w in self.workers]]
        view.push(namespace, block=False).get(timeout=self.timeout)
        self._state.add_push(namespace)

    def missing_on_chief(self, names: list[str]) -> list[str]:
        self._require_workers()
        return self._call_each([self.workers[0].engine_id], "tfmw_notebook.worker.cell",
                               "missing_names", [(list(names),)], what="lookup")[0]

    def pull(self, names: list[str], rank: int = 0) -> dict[str, Any]:
        """Copy variables from one worker (the chief by default)."""
        self._require_workers()
        values = self._group.client[self.workers[rank].engine_id].pull(
            list(names), block=False).get(timeout=self.timeout)
        return dict(zip(names, values))

    def restore_checkpoint(self, path: str, model_name: str = "model") -> list[str]:
        """Load checkpoint `path` into the variable `model_name` on every worker.

        Returns each worker's digest of the restored weights (equal when the
        restore is bit-identical everywhere).
        """
        self._require_workers()
        ids = [w.engine_id for w in self.workers]
        self._call_each(ids, "tfmw_notebook.worker.checkpointing", "restore_named",
                        [(model_name, path)] * len(ids), what="restore")
        return self._call_each(ids, "tfmw_notebook.worker.checkpointing", "weights_digest",
                               [(model_name,)] * len(ids), what="digest")

    # -- lifecycle -------------------------------------------------------------

    last_restart_seconds = 0.0

    def restart(self) -> None:
        """Fresh engine processes, same size, bootstrapped again (variables reset)."""
        self._replace_workers()
        self._forget_state()

    def _replace_workers(self) -> None:
        """Kill the workers and bootstrap new ones; what they held is not brought back."""
        began = time.perf_counter()
        size = self.size or self._group_size
        if not self._group.can_restart():
            # Refuse before killing anything: these engines are not ours to replace.
            self._group.restart(size, timeout=self.timeout)
        self._group.kill({w.engine_id: (w.host, w.pid) for w in self.workers})
        self.workers = []
        self._state.clear()  # a restore adds back what it replays
        self._group.restart(size, timeout=self.timeout)
        self._make_workers()
        self.restarts += 1
        self.last_restart_seconds = time.perf_counter() - began

    def _forget_state(self) -> None:
        """No restore will need the end-of-fit snapshots any more: remove them."""
        self._state.clear()
        if self._state_dir is not None:
            shutil.rmtree(self._state_dir, ignore_errors=True)
            self._state_dir = None

    def stop(self) -> None:
        """End every engine process we started (attached clusters keep theirs)."""
        workers, self.workers = self.workers, []
        self._forget_state()
        self._group.stop()
        if self._group.owned:
            # A worker stuck in C++ ignores the launcher's polite signals.
            self._group.kill({w.engine_id: (w.host, w.pid) for w in workers
                              if not is_this_host(w.host) or pid_alive(w.pid)})

    def status(self) -> list[dict]:
        """One row per rank: rank, host, address, pid, alive, running."""
        if not self.workers:
            return []
        dead = set(self._dead_ranks())
        return [{"rank": rank, "engine": w.engine_id, "host": w.host, "address": w.endpoint,
                 "pid": w.pid, "alive": rank not in dead, "running": self._running}
                for rank, w in enumerate(self.workers)]

    def describe(self) -> str:
        addresses = ", ".join(w.endpoint for w in self.workers)
        return (f"{self.size} workers ready ({addresses}), TensorFlow {self.tf_version}, "
                f"in {self.started_seconds:.1f} s")

    def _require_workers(self) -> None:
        if not self.workers:
            raise NoClusterError("the cluster has no workers (stopped, or a restart failed): "
                                 "run `%tfdist restart` or `%tfdist start`")


class _CellFault(Exception):
    """How a cell failed, before deciding whether the workers can be kept."""

    def __init__(self, message: str, *, reason: str, rank: int | None = None,
                 traceback: str = "", retryable: bool = False, all_finished: bool = False,
                 error_name: str = "", error_value: str = ""):
        super().__init__(message)
        self.message = message
        self.reason = reason              # "error", "died", "timeout" or "interrupt"
        self.rank = rank
        self.traceback = traceback
        self.retryable = retryable
        self.all_finished = all_finished  # every rank raised or returned
        self.error_name = error_name
        self.error_value = error_value


def _notice(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def _call_worker_function(module: str, function: str, *args):
    """Runs on an engine: import the worker module there and call it."""
    import importlib

    return getattr(importlib.import_module(module), function)(*args)


def _check_settings(n, timeout, communication, gpus_per_worker) -> None:
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"Invalid value for argument `n`. Received: n={n!r}. "
                         "Expected a whole number of workers >= 1")
    if timeout <= 0:
        raise ValueError(f"Invalid value for argument `timeout`. Received: timeout={timeout!r}. "
                         "Expected seconds > 0")
    if communication not in COMMUNICATIONS:
        raise ValueError(f"Invalid value for argument `communication`. Received: "
                         f"communication={communication!r}. Expected one of {COMMUNICATIONS}")
    if gpus_per_worker < 0:
        raise ValueError(f"Invalid value for argument `gpus_per_worker`. Received: "
                         f"gpus_per_worker={gpus_per_worker!r}. Expected >= 0")


def _controller_host(client) -> str:
    url = getattr(client, "_config", {}).get("registration", "") or ""
    host = url.rsplit("//", 1)[-1].rsplit(":", 1)[0]
    return host or "127.0.0.1"


def _is_engine_death(exc: BaseException) -> bool:
    import ipyparallel.error as ipp_error

    if isinstance(exc, ipp_error.EngineError):
        return True
    return getattr(exc, "ename", "") == "EngineError"


def _remote_traceback(exc: BaseException) -> str:
    text = getattr(exc, "traceback", None)
    if isinstance(text, str) and text:
        return _drop_internal_frames(text)
    return ""


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_INTERNAL_FRAMES = ("tfmw_notebook" + os.sep + "worker" + os.sep,
                    "tfmw_notebook" + os.sep + "cluster.py",
                    "ipyparallel" + os.sep, "<string>")


def _drop_internal_frames(text: str) -> str:
    """Keep the user's frames: drop those of our runner, ipyparallel and exec.

    Frames are blocks that start at a `File ...` line and end at a blank line
    (IPython's format); the header and the final error line are kept.
    """
    kept, skipping = [], False
    for line in text.splitlines(keepends=True):
        plain = _ANSI.sub("", line).strip()
        if plain.startswith("File "):
            skipping = any(marker in plain for marker in _INTERNAL_FRAMES)
        elif not plain and skipping:
            skipping = False
            continue  # the blank line that closed a dropped frame
        if not skipping:
            kept.append(line)
    return "".join(kept)


def _remote_summary(exc: BaseException) -> str:
    ename = getattr(exc, "ename", None) or type(exc).__name__
    evalue = getattr(exc, "evalue", None)
    if evalue is None:
        evalue = str(exc)
    evalue = str(evalue).strip().splitlines()[0] if str(evalue).strip() else ""
    return f"{ename}: {evalue}" if evalue else ename


def _prefixed(text: str, rank: int) -> str:
    return "".join(f"[worker {rank}] {line}\n" for line in text.rstrip("\n").splitlines())
