"""The only door from the notebook to the engines' worker code.

Each worker function the notebook calls is named here once, as one typed method,
and matched by one entry of worker/entry.py (a unit test resolves them all). Every
call that waits on several engines waits on *all* replies under one deadline, so an
error on any engine raises here.
"""

from __future__ import annotations

import time
import weakref
from typing import Any

from ipyparallel import AsyncResult

from ...errors import ClusterSetupError, remote_summary
from ...protocol import worker_modules
from ...protocol.run_options import CellOptions, FitState
from ...worker.entry import call
from ..launch.engines import EngineGroup
from .engine_reply import EngineReply


class WorkerCalls:
    """Calls into the worker code of `group`'s engines; `timeout` bounds each wait."""

    def __init__(self, group: EngineGroup, timeout: float):
        self.group = group
        self.timeout = timeout

    def each(self, entry: str, ids: list[int], args_per_engine: list[tuple], *, what: str,
             timeout: float | None = None) -> list:
        """Call `entry` on each engine with its own args; all replies, or ClusterSetupError."""
        client = self.group.client
        futures = [client[eid].apply_async(call, entry, *args)
                   for eid, args in zip(ids, args_per_engine)]
        return self._gather(ids, futures, what, timeout)

    def _same(self, entry: str, ids: list[int], *args: Any, what: str,
              timeout: float | None = None) -> list:
        """Call `entry` with the same args on every engine of `ids`, sent once."""
        return self._gather(ids, self._broadcast(ids, entry, *args), what, timeout)

    def _broadcast(self, ids: list[int], entry: str, *args: Any) -> list:
        """One request, which ipyparallel's broadcast scheduler hands to every engine of
        `ids` (one message per engine cost the notebook ~2 ms apiece, measured at 12);
        one reply per engine (EngineReply), in the order of `ids`."""
        client = self.group.client
        sent = broadcast_view(client, ids).apply_async(call, entry, *args)
        _sent(client, sent)
        return per_engine(sent)

    def push(self, ids: list[int], namespace: dict[str, Any]) -> None:
        """Bind `namespace`'s names on every engine of `ids`: one request, however many."""
        client = self.group.client
        sent = broadcast_view(client, ids).push(namespace, block=False)
        _sent(client, sent)
        sent.get(timeout=self.timeout)

    def _gather(self, ids: list[int], futures: list, what: str, timeout: float | None) -> list:
        timeout = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        results = []
        for engine_id, future in zip(ids, futures):
            if not future.wait(max(0.0, deadline - time.monotonic())):
                raise ClusterSetupError(f"engine {engine_id} did not finish the {what} within "
                                        f"{timeout:g} s ({self._standing(engine_id)}); raise "
                                        "the timeout or check that engine")
            try:
                results.append(future.get())
            except Exception as exc:
                raise ClusterSetupError(
                    f"{what} failed on engine {engine_id}: {remote_summary(exc)}") from None
        return results

    def _standing(self, engine_id: int) -> str:
        """Whether a silent engine is still there: a slow or stuck one is, a dead one is not."""
        try:
            # The client's list of engines is its own: it outlives a controller that ended.
            if not self.group.controller_answers():
                return "the controller does not answer"
            registered = engine_id in self.group.registered()
        except Exception:   # the controller itself is gone: nothing more to say
            return "the controller does not answer"
        if registered:
            return "it is still registered with the controller: busy or stuck"
        return "it is no longer registered with the controller: its process ended"

    def _one(self, entry: str, engine_id: int, *args: Any) -> Any:
        return self.each(entry, [engine_id], [args], what="lookup")[0]

    def forget_ended(self) -> None:
        """Let go of the client's records of the calls that ended (forget_ended_records)."""
        forget_ended_records(self.group.client)

    # -- start-up ---------------------------------------------------------------

    def describe_engines(self, ids: list[int], controller_host: str, interface: str | None,
                         address_map: dict[str, str] | None,
                         gpus_per_worker: int | str = 0) -> list[dict]:
        return self._same("describe_engine", ids, controller_host, interface, address_map,
                          gpus_per_worker, what="handshake")

    def bootstrap(self, ids: list[int], settings: list[dict]) -> list[dict]:
        return self.each("bootstrap", ids, [(s,) for s in settings], what="bootstrap")

    def versions(self, engine_id: int) -> dict[str, str]:
        """{"tf_version": ..., "keras": ...} of a worker that is already bootstrapped."""
        return self._one("versions", engine_id)

    # -- cells --------------------------------------------------------------------

    def submit_cell(self, ids: list[int], source: str, filename: str, display_rank: int | None,
                    options: CellOptions, state: FitState, scope: bool = True) -> list:
        """Start the cell on the engines `ids`, sent once; one EngineReply per engine, in
        the order of `ids`, which cell_watch.py watches."""
        return self._broadcast(ids, "run_cell", source, filename, display_rank, options, state,
                               scope)

    def receive_shards(self, ids: list[int], tickets: list, timeout: float) -> list[dict]:
        """Each worker builds its rows of a shard set (worker/data/shards.py)."""
        return self.each("receive_shards", ids, [(ticket,) for ticket in tickets],
                         what="shard delivery", timeout=timeout)

    def missing_names(self, engine_id: int, names: list[str]) -> list[str]:
        return self._one("missing_names", engine_id, list(names))

    def missing_magics(self, engine_id: int, names: list[str]) -> list[str]:
        return self._one("missing_magics", engine_id, list(names))

    def trial_report(self, engine_id: int) -> dict:
        """What the last cell's fits saw as a sweep's trial (worker/experiments/trial_report.py)."""
        return self._one("trial_report", engine_id)

    def tensorboard_log_dirs(self, engine_id: int) -> list[str]:
        return self._one("tensorboard_log_dirs", engine_id)

    # -- checkpoints and recovery ---------------------------------------------------

    def restore_checkpoint(self, ids: list[int], model_name: str, path: str) -> list[dict]:
        return self._same("restore_checkpoint", ids, model_name, path, what="restore")

    def weights_digests(self, ids: list[int], model_name: str) -> list[str]:
        return self._same("weights_digest", ids, model_name, what="digest")

    def collective_positions(self, ids: list[int], timeout: float) -> list[list[int]]:
        return self._same("collective_position", ids, what="collective check",
                          timeout=timeout)

    def collective_probe(self, ids: list[int], seconds: float, timeout: float) -> list[float]:
        return self._same("collective_probe", ids, seconds, what="test all-reduce",
                          timeout=timeout)

    # -- diagnose -------------------------------------------------------------------

    def diagnose_problem(self, engine_id: int, model: str | None,
                         data: str | None) -> str | None:
        return self._one("diagnose_problem", engine_id, model, data)

    def diagnose_results(self, ids: list[int]) -> list[dict]:
        return self._same("diagnose_result", ids, what="lookup")


_views: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()   # client -> (ids, view)


def broadcast_view(client, ids: list[int]):
    """The client's broadcast view of the engines `ids`, the one made for the same ids last
    (ipyparallel's views are made to be used again; making one, with its traits, was 5% of
    the notebook's CPU in a trivial cell, measured at N = 4)."""
    kept = _views.get(client)
    if kept is not None and kept[0] == tuple(ids):
        return kept[1]
    view = client.broadcast_view(ids)
    _views[client] = (tuple(ids), view)
    return view


def per_engine(sent: AsyncResult) -> list[EngineReply]:
    """One reply per engine of the broadcast `sent`, in its order, each on the record
    ipyparallel made for that engine's message as it went out (engine_reply.py: lighter
    than an AsyncResult per engine).

    Not `client.get_result(msg_id)`: that looks the record up afterwards, and a cell quick
    enough to end while the notebook was held (a busy machine) has had its record dropped
    from the client's caches by `sent` itself: an empty one stands in, its output done
    (measured: a fast cell's whole stdout lost on every worker, 1 run in ~50 under load).
    """
    return [EngineReply(child, target) for child, target in zip(sent._children, sent._targets)]


def _sent(client, sent: AsyncResult) -> None:
    """What the client keeps of a broadcast just `sent` is let go as it ends."""
    for msg_id in sent.msg_ids:
        forget_when_done(client, msg_id)
    forget_records_when_ended(client, list(sent._children))


_unended: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()   # client -> [[futures]]


def forget_records_when_ended(client, children: list) -> None:
    """Drop the client's records of the broadcasts sent before that have ended (each
    engine's reply and output in); keep `children`, the message futures of the one just
    sent, for forget_ended_records to look at later.

    ipyparallel drops a call's records once its reply and output are in, but not a
    broadcast's: neither each engine's (the future of its output, its metadata) nor those
    of the request itself, whose own reply never comes. Kept for good, they were 1,220
    objects a trivial cell on 12 workers, and the notebook's full garbage collections,
    which walk them all, took 1.8 s in 600 such cells (measured)."""
    forget_ended_records(client)
    _unended.setdefault(client, []).append(children)


def forget_ended_records(client) -> None:
    """Drop the records of the broadcasts that ended since they were sent (a cell's watch
    calls it as the cell ends: records let go young are freed by the cheap collections)."""
    unended = _unended.get(client) or []
    still = []
    for futures in unended:
        if all(_ended(future) for future in futures):
            _drop_records(client, futures)
        else:
            still.append(futures)
    unended[:] = still


def _ended(future) -> bool:
    """Its reply came, and its output ended (or never will: its engine died)."""
    output = getattr(future, "output", None)
    return future.done() and (output is None or output.done() or future.exception() is not None)


def _drop_records(client, futures: list) -> None:
    msg_ids = {future.msg_id for future in futures}
    msg_ids.update(future.header.get("msg_id") for future in futures)   # the request's
    for records in (getattr(client, "_futures", {}), getattr(client, "_output_futures", {}),
                    client.metadata, client.results):
        for msg_id in msg_ids:
            records.pop(msg_id, None)


def forget_when_done(client, msg_id: str) -> None:
    """Drop a broadcast reply's future from the client once it resolves, as ipyparallel
    does for a direct call's (not for a broadcast's). Else a reply that arrives after the
    future was failed for an engine the hub gave up on (its host cut off, then back) is set
    a second time: the error, raised in the client's reply stream, stalls every later reply
    on it (measured: the resize after such a host came back waited for its replies forever)."""
    future = client._futures.get(msg_id)
    if future is not None:
        future.add_done_callback(lambda _: client._futures.pop(msg_id, None))


def diagnose_cell(model: str | None, data: str | None, batch_size: int | None,
                  steps: int) -> str:
    """The cell that times a training step on every worker: it runs as a cell (in the
    strategy's scope, watched like any cell) and calls the worker's entry."""
    return worker_modules.entry_call_code("diagnose_measure", model, data, batch_size, steps)
