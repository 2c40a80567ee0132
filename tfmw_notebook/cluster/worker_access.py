"""What a TFCluster reads from and writes to its workers' namespaces.

`WorkerAccess` is TFCluster's base: pushing and pulling variables, asking the chief,
loading a checkpoint on every worker, and each worker's status row. It holds no
state of its own; TFCluster sets the engine group, the workers and the timeout.
"""

from __future__ import annotations

from typing import Any

from ..errors import BadArgument, NoClusterError
from ..protocol.devices import describe_devices
from ..protocol.tfconfig import EngineReport, local_ranks
from .cells.cell_watch import dead_ranks
from .cells.state_log import KeptState
from .cells.worker_calls import WorkerCalls
from .data.shard_sets import ShardSet, deliver, large_values
from .launch.engines import EngineGroup, is_this_host


class WorkerAccess:
    _group: EngineGroup
    workers: list[EngineReport]          # index = rank
    timeout: float
    kept: KeptState
    _running: str | None                 # the first line of the cell running, if any

    @property
    def state_log(self):
        return self.kept.log

    @property
    def calls(self) -> WorkerCalls:
        """The door to the workers' code (worker_calls.py)."""
        return WorkerCalls(self._group, self.timeout)

    @property
    def chief_id(self) -> int:
        """The chief's (rank 0's) engine id; NoClusterError when there are no workers."""
        self._require_workers()
        return self.workers[0].engine_id

    def push(self, namespace: dict[str, Any]) -> None:
        """Send notebook variables to every worker. Large arrays go as a shard set every
        worker takes whole: mapped from shared memory on this host, streamed to others
        (not pickled through the controller)."""
        self._require_workers()
        large = large_values(namespace)
        if large:
            try:
                whole = self.kept.shards.make(large, whole=True)
            except BadArgument:   # no room in shared memory: the controller's way
                large = {}
            else:
                try:
                    self.deliver_shards(whole)
                finally:
                    self.kept.shards.drop_unheld(whole)
        rest = {name: value for name, value in namespace.items() if name not in large}
        if rest:
            self.calls.push([w.engine_id for w in self.workers], rest)
            self.kept.shards.forget(rest)
            self.state_log.add_push(rest)

    def shard(self, values: dict[str, Any]) -> list[dict]:
        """Split notebook values by rows over the workers: worker r gets the r-th of N
        contiguous, near-equal chunks of every value (NumPy arrays, pandas DataFrames and
        Series, tuples, lists or dicts of them; all of one length). Workers on this host
        map their rows from one shared copy; others read theirs from this notebook.
        Returns each worker's {"rows", "bytes"}; BadArgument (nothing sent) for values
        that cannot be sharded."""
        self._require_workers()
        shard_set = self.kept.shards.make(values)
        try:
            return self.deliver_shards(shard_set)
        finally:
            self.kept.shards.drop_unheld(shard_set)

    def deliver_shards(self, shard_set: ShardSet) -> list[dict]:
        """Every worker takes its rows of `shard_set`: again after a restart or a resize,
        where a set sharded anew since is replaced by what its names hold now."""
        local = [is_this_host(w.host) for w in self.workers]
        host, _ = self._group.controller_address_for_engines()
        got: list[dict] = []
        for current in self.kept.shards.in_place_of(shard_set):
            got = deliver(current, self.workers, local, self.calls, host, self.timeout)
            self.kept.shards.hold(current)
            self.state_log.add_shard(current)
        return got

    def pull(self, names: list[str], rank: int = 0) -> dict[str, Any]:
        """Copy variables from one worker (the chief by default)."""
        self._require_workers()
        values = self._group.client[self.workers[rank].engine_id].pull(
            list(names), block=False).get(timeout=self.timeout)
        return dict(zip(names, values))

    def missing_on_chief(self, names: list[str]) -> list[str]:
        return self.calls.missing_names(self.chief_id, names)

    def missing_magics(self, names: list[str]) -> list[str]:
        """Of '%name' / '%%name', the magics the workers' IPython lacks (asks the chief)."""
        return self.calls.missing_magics(self.chief_id, names)

    def trial_report(self) -> dict:
        """What the last cell's fits saw as a sweep's trial, from the chief (all agree)."""
        return self.calls.trial_report(self.chief_id)

    def tensorboard_dirs(self) -> list[str]:
        """Where the chief's TensorBoard callbacks wrote logs (the only ones kept)."""
        return self.calls.tensorboard_log_dirs(self.chief_id)

    def restore_checkpoint(self, path: str, model_name: str = "model") -> list[str]:
        """Load checkpoint `path` into the variable `model_name` on every worker.

        Returns each worker's digest of the restored weights (equal when the
        restore is bit-identical everywhere).
        """
        self._require_workers()
        ids = [w.engine_id for w in self.workers]
        self.calls.restore_checkpoint(ids, model_name, path)
        return self.calls.weights_digests(ids, model_name)

    def status(self) -> list[dict]:
        """One row per rank: rank, host, local rank, address, pid, alive, devices ("GPU 0,1"
        or "CPU"), running."""
        if not self.workers:
            return []
        dead = set(dead_ranks(self._group, self.workers))
        local = local_ranks(self.workers)
        return [{"rank": rank, "engine": w.engine_id, "host": w.host, "local_rank": local[rank],
                 "address": w.endpoint, "pid": w.pid, "alive": rank not in dead,
                 "devices": describe_devices(w.devices),
                 "running": self._running}
                for rank, w in enumerate(self.workers)]

    def _require_workers(self) -> None:
        if not self.workers:
            raise NoClusterError("the cluster has no workers (stopped, or a restart failed): "
                                 "run `cluster.restart()` or `TFCluster.start()`")
        if not self._group.controller_answers():
            host, port = self._group.controller_address()
            raise NoClusterError(f"the ipyparallel controller at {host}:{port} does not answer: "
                                 "start it and its engines again, then `TFCluster.attach()` "
                                 "(or `cluster.stop()` and `TFCluster.start()`)")
