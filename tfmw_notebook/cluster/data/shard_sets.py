"""The shard sets a cluster's workers hold, and their delivery (`%%tfdist --shard`, and
large `--push` values, which travel the same way to every worker whole).

A set is made once from the notebook's values (its arrays copied once into a shared
file) and delivered to the workers as they are now: again after a restart, with new row
ranges after a resize. Its file is removed when every name it holds was sharded anew,
or when the cluster stops.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from ...protocol.shard_layout import ShardTicket, StreamSource, chunk_bounds
from ...protocol.tfconfig import EngineReport
from . import shared_file
from .sender import Sender, local_addresses
from .split import Parts, take_apart

_PROGRESS_AFTER = 1.0   # seconds: a longer stream to other hosts shows its progress


@dataclass
class ShardSet:
    names: tuple[str, ...]
    parts: Parts
    path: str
    blocks: tuple
    freed: bool = False   # its file removed: every name it held was sharded anew
    whole: bool = False   # pushed: every worker takes every row

    @property
    def rows(self) -> int:
        return next(iter(self.parts.rows.values()))

    def tickets(self, workers: list[EngineReport], local: list[bool],
                stream: StreamSource | None) -> list[ShardTicket]:
        """Each worker's ticket, in rank order: its rows of every value."""
        return [ShardTicket(recipes=self.parts.recipes, blocks=self.blocks, start=start,
                            stop=stop, rows=self.rows,
                            path=self.path if here else None,
                            stream=None if here else stream,
                            parts={i: other[start:stop]
                                   for i, other in enumerate(self.parts.others)},
                            whole=self.whole)
                for (start, stop), here in zip(self.bounds(len(workers)), local)]

    def bounds(self, workers: int) -> list[tuple[int, int]]:
        if self.whole:
            return [(0, self.rows)] * workers
        return chunk_bounds(self.rows, workers)


class ShardSets:
    """The sets the workers hold now, by name."""

    def __init__(self) -> None:
        self._by_name: dict[str, ShardSet] = {}

    def make(self, values: dict[str, Any], *, whole: bool = False) -> ShardSet:
        """A new set from the notebook's values (`whole`: each to every worker, a large
        push); nothing is kept if they cannot be sharded."""
        what = ("--push " if whole else "--shard ") + " ".join(values)
        parts = take_apart(values)
        path, blocks = shared_file.create(parts, what)
        return ShardSet(tuple(values), parts, path, blocks, whole=whole)

    def forget(self, names) -> None:
        """`names` now hold values sent another way: sets they alone held are freed."""
        for name in names:
            shard_set = self._by_name.pop(name, None)
            if shard_set is not None and shard_set not in self._by_name.values():
                _free(shard_set)

    def hold(self, shard_set: ShardSet) -> None:
        """The workers now hold `shard_set`: sets it replaced entirely are freed."""
        replaced = {id(s): s for name in shard_set.names
                    if (s := self._by_name.get(name)) is not None}
        for name in shard_set.names:
            self._by_name[name] = shard_set
        held = {id(s) for s in self._by_name.values()}
        for key, old in replaced.items():
            if key not in held:
                _free(old)

    def in_place_of(self, shard_set: ShardSet) -> list[ShardSet]:
        """What a replay delivers for `shard_set`: itself, or once it was freed, the sets
        its names hold now (a restart gives the workers what the names hold now)."""
        if not shard_set.freed:
            return [shard_set]
        unique: dict[int, ShardSet] = {}
        for name in shard_set.names:
            if (current := self._by_name.get(name)) is not None:
                unique.setdefault(id(current), current)
        return list(unique.values())

    def drop_unheld(self, shard_set: ShardSet) -> None:
        """Free a set whose delivery failed (the workers hold none of it)."""
        if all(self._by_name.get(name) is not shard_set for name in shard_set.names):
            _free(shard_set)

    def current(self) -> list[ShardSet]:
        unique: dict[int, ShardSet] = {}
        for shard_set in self._by_name.values():
            unique.setdefault(id(shard_set), shard_set)
        return list(unique.values())

    def rows_held(self) -> dict[str, int]:
        return {name: shard_set.rows for name, shard_set in self._by_name.items()}

    def close(self) -> None:
        for shard_set in self.current():
            _free(shard_set)
        self._by_name.clear()


def _free(shard_set: ShardSet) -> None:
    shared_file.remove(shard_set.path)
    shard_set.freed = True


# A pushed array this large goes through shared memory (or the sender), not the controller:
# 1 GiB through the controller took 9.8 s to 2 local workers.
LARGE_PUSH_BYTES = 64 << 20


def large_values(values: dict[str, Any]) -> dict[str, Any]:
    """The values of a push that travel as a whole set: NumPy arrays of a plain dtype, at
    least LARGE_PUSH_BYTES, with rows."""
    import numpy as np

    return {name: value for name, value in values.items()
            if isinstance(value, np.ndarray) and value.ndim > 0 and not value.dtype.hasobject
            and value.nbytes >= LARGE_PUSH_BYTES}


def deliver(shard_set: ShardSet, workers: list[EngineReport], local: list[bool],
            calls, controller_host: str | None, timeout: float) -> list[dict]:
    """Every worker builds its rows; those on other hosts read them from a sender."""
    sender, progress = None, None
    if not all(local):
        bounds = shard_set.bounds(len(workers))
        progress = _Progress(sum(b.row_bytes for b in shard_set.blocks)
                             * sum(stop - start for (start, stop), here in zip(bounds, local)
                                   if not here))
        sender = Sender(shard_set.path, shard_set.blocks, progress.add)
    try:
        addresses = _addresses(controller_host)
        tickets = shard_set.tickets(workers, local, sender.source(addresses)
                                    if sender is not None else None)
        return calls.receive_shards([w.engine_id for w in workers], tickets, timeout)
    finally:
        if sender is not None:
            sender.close()
        if progress is not None:
            progress.finish()


def _addresses(controller_host: str | None) -> tuple[str, ...]:
    """Where workers on other hosts try to reach the sender: the address they reach the
    controller at first (the notebook is usually on its host), then this host's."""
    found = [controller_host] if controller_host and "/" not in controller_host else []
    return tuple(dict.fromkeys([*found, *local_addresses()]))


class _Progress:
    """A line that says how far a long stream has come (after a second, every second)."""

    def __init__(self, total: int):
        self._total, self._sent = max(1, total), 0
        self._began = self._last = time.monotonic()
        self._shown = False

    def add(self, nbytes: int) -> None:
        self._sent += nbytes
        now = time.monotonic()
        if now - self._began >= _PROGRESS_AFTER and now - self._last >= 1.0:
            self._last = now
            done = min(100, 100 * self._sent // self._total)
            print(f"\rtfdist: sending shards to other hosts: {done}% "
                  f"({self._sent / 2**20:.0f} MiB)", end="", flush=True)
            self._shown = True

    def finish(self) -> None:
        if self._shown:   # end the line the progress was drawn on
            print(flush=True)
