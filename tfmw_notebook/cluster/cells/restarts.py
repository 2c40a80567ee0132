"""`%tfdist restart [--keras 3|2]` and `%tfdist resize -n N`: fresh workers, workers that
run the other Keras, or another number of workers with the same state.

A plain restart gives fresh workers with their variables reset. TensorFlow reads which
Keras `tf.keras` is (TF_USE_LEGACY_KERAS) once, at import, so switching Keras also needs new
worker processes; they are replaced as by any restart, then the pushes and cells run so
far are replayed on them as after a failure (recovery.py), quietly and in order. Each
replayed fit() trains again: the state a fit ended with was kept by the other Keras, which
this one cannot read into its models.

MultiWorkerMirroredStrategy cannot change its number of workers inside live processes (its
collectives are configured once, at start-up), so a resize is a restart of another size
followed by the same replay; there each fit gives back the state it ended with (its
variables are mirrored: a snapshot of any old worker suits every new one).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from ...errors import BadArgument
from ...protocol.tfconfig import KERAS_VERSIONS, EngineReport, keras_environment
from ..launch import host_capacity
from ..launch.engines import EngineGroup, relaunch_environment
from .interrupt_hold import one_interrupt_held
from .recovery import Recovery, WorkerGroup
from .state_log import KeptState, RestoreReport

# Why the replayed fits train again, for the restore's line.
OTHER_KERAS = "their kept state is of the other Keras"


class Restarts:
    """TFCluster's base for `restart`; TFCluster sets what is declared here."""

    _group: EngineGroup
    workers: list[EngineReport]          # index = rank
    keras: int
    kept: KeptState
    restore_state: bool
    replace_workers: Callable[..., None]
    _running: str | None
    # (workers before, after) of the last resize, until a run record has noted it.
    resized: tuple[int, int] | None = None

    def forget_state(self) -> None:
        """No restore will need the end-of-fit snapshots any more: remove them."""
        self.kept.forget()

    def restart(self, keras: int | None = None) -> RestoreReport | None:
        """Fresh engine processes, same size, bootstrapped again (variables reset).

        With `keras` (3 or 2, as for start) the new workers run that Keras and the
        pushes and cells run so far are replayed on them; returns what that replay did
        (None when there was nothing to replay, or `%tfdist restore off`). New workers
        that cannot start raise, and the cluster stays set to `keras`: a restart with
        the other one brings that kind of worker back.
        """
        if keras is not None and keras not in KERAS_VERSIONS:
            raise BadArgument(f"Invalid value for argument `keras`. Received: keras={keras!r}. "
                              f"Expected one of {KERAS_VERSIONS}")
        # Refuse before killing anything: these engines may not be ours to replace.
        self._group.check_restartable([w.host for w in self.workers])
        if keras is None:
            self.replace_workers()
            self.forget_state()
            return None
        log = [step.without_kept_state() for step in self.kept.log.snapshot()]
        self.keras = keras
        relaunch_environment(self._group, keras_environment(keras))
        with one_interrupt_held("restarting the workers"):
            self.replace_workers()
        self.forget_state()   # the snapshots the old workers kept, unreadable now
        if not (self.restore_state and log):
            return None
        with one_interrupt_held("giving the fresh workers their state back"):
            group = cast(WorkerGroup, self)   # TFCluster, the class this is a base of
            return Recovery(group).restore(log, RestoreReport(rerun_reason=OTHER_KERAS),
                                           announce=False)

    def resize(self, n: int) -> RestoreReport | None:
        """Replace the workers by `n` new ones and give them the state the old ones had:
        the pushes and cells run so far are replayed, each fit giving back the state it
        ended with (`restore_state` off: the new workers start empty). Returns what the
        replay did (None when nothing was replayed). A dataset batched before it is
        distributed keeps its global batch; each worker takes 1/n of it.
        """
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise BadArgument(f"Invalid value for argument `n`. Received: n={n!r}. "
                              "Expected a whole number of workers >= 1")
        if self._running is not None:
            raise BadArgument("a cell is running on the workers: resize once it has ended")
        group = self._group
        group.check_restartable([w.host for w in self.workers])
        spares = group.standby.size if group.standby is not None else 0
        too_many = host_capacity.problem(n, host_capacity.read_capacity(), spares=spares) \
            if group.owned else None
        if too_many:
            raise BadArgument(too_many)
        log, before = self.kept.log.snapshot(), len(self.workers)
        with one_interrupt_held("resizing the workers"):
            self.replace_workers(n)
        self.resized = (before, n)
        if not (self.restore_state and log):
            self.forget_state()
            return None
        with one_interrupt_held("giving the new workers their state back"):
            return Recovery(cast(WorkerGroup, self)).restore(log, announce=False)
