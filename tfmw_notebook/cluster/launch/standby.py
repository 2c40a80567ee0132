"""Warm standby: spare engines, TensorFlow already imported, that a restart makes workers.

A restart replaces every worker (MultiWorkerMirroredStrategy forms its group once, at
start-up), and a cold engine spends most of its start importing TensorFlow. Spares launched
ahead of time, exactly like the workers (same command, environment, Keras and private
network), have done that import when a restart needs them: the restart then only gives
them their TF_CONFIG and strategy. After each start or restart the pool is filled again
in the background. With K spares a restart of up to K workers is warm; with fewer spares
than workers it also waits for the cold engines the rest need.

Only for engines this process launches on this host: every registered engine that is
neither a worker nor retired is then a spare. Knows nothing of TensorFlow.
"""

from __future__ import annotations

import logging
from collections.abc import Collection

import ipyparallel as ipp

from .launched_engines import kill_running, stop_ended_sets

_log = logging.getLogger("tfmw_notebook")


class WarmStandby:
    """K spare engines of `cluster`, launched with `launch_kwargs` (the group's own dict:
    a new environment or network command reaches later spares)."""

    def __init__(self, size: int, cluster: ipp.Cluster, launch_kwargs: dict):
        self.size = size
        self.stale = False   # launched for an environment or network no longer wanted
        self._cluster = cluster
        self._launch_kwargs = launch_kwargs
        self._expected = 0   # spares launched and not taken yet (registered or coming)
        self.sets: list[str] = []   # the engine sets the spares were launched in

    def end_old(self, registered: Collection[int], taken: Collection[int],
                unreachable: Collection[str] = ()) -> set[int]:
        """After the workers were killed: close their engine sets, and end stale spares
        too. Returns the ids of spares ended (registered until the hub notices).
        (`unreachable`: hosts known lost, where spares of this host never are.)"""
        if not self.stale:
            stop_ended_sets(self._cluster)
            return set()
        kill_running(self._cluster)   # the workers are dead already: only spares run
        ended = set(self.spares(registered, taken))
        self._expected, self.stale = 0, False
        try:
            self._cluster.stop_engines_sync()
        except Exception as exc:
            _log.warning("closing the stale spare engines' sets: %r", exc)
        return ended

    def spares(self, registered: Collection[int], taken: Collection[int]) -> list[int]:
        """The registered spares, oldest first: every engine not in `taken`."""
        return sorted(set(registered) - set(taken))

    def take(self, n: int, registered: Collection[int], taken: Collection[int]) -> list[int]:
        """Up to `n` registered spares, now workers-to-be."""
        chosen = self.spares(registered, taken)[:n]
        self._expected = max(0, self._expected - len(chosen))
        return chosen

    def claim_coming(self, n: int, registered: Collection[int], taken: Collection[int]) -> int:
        """Of `n` engines still needed, how many spares on their way will give: the caller
        launches only the rest and waits for all `n` to register."""
        coming = max(0, self._expected - len(self.spares(registered, taken)))
        claimed = min(n, coming)
        self._expected -= claimed
        return claimed

    def refill(self) -> int:
        """Launch what the pool lacks, without waiting for it; returns how many. A launch
        that fails leaves the next restart cold, not the notebook stopped."""
        missing = self.size - self._expected
        if missing <= 0:
            return 0
        try:
            self.sets.append(self._cluster.start_engines_sync(missing, **self._launch_kwargs))
        except Exception as exc:
            _log.warning("could not launch %d spare engines: %r", missing, exc)
            return 0
        self._expected += missing
        return missing
