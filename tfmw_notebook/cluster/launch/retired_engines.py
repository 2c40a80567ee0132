"""The engines a group is done with: old workers, the cluster's engines from before an
attach, spares ended. Known by id *and* by the hub's name for the engine (its uuid).

mpiexec's engines ask for their MPI rank as their id, and the hub gives an id out again once
its engine has left: a spare launched after a restart may register under a retired worker's
id (measured: the refill of `attach --standby 2` on MPI came back as engines 0 and 1, which
a set of ids kept out of the pool for good). An id is retired only while it names the
engine it named when it was retired.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable


class RetiredEngines:
    """`name_of(id)`: the hub's name of the engine registered under `id` now (None: none)."""

    def __init__(self, name_of: Callable[[int], str | None]):
        self._name_of = name_of
        self._names: dict[int, str | None] = {}

    def add(self, ids: Iterable[int]) -> None:
        """Retire the engines registered under `ids` now (an id no engine holds keeps the
        name it was retired with, if any: a killed engine leaves the hub soon after)."""
        for engine_id in ids:
            name = self._name_of(engine_id)
            if name is not None or engine_id not in self._names:
                self._names[engine_id] = name

    def ids(self) -> set[int]:
        """The retired ids, less those that now name another engine."""
        out = set()
        for engine_id, name in self._names.items():
            now = self._name_of(engine_id)
            if name is None or now is None or now == name:
                out.add(engine_id)
        return out
