"""Retired engines are known by the hub's name too (cluster/launch/retired_engines.py): an id
the hub gives again to a new engine (mpiexec's engines ask for their MPI rank) is not retired."""

from __future__ import annotations

import pytest
from tfmw_notebook.cluster.launch.retired_engines import RetiredEngines

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]


def test_an_id_given_again_to_a_new_engine_is_no_longer_retired():
    hub = {0: "worker-a", 1: "worker-b", 2: "spare-c"}
    retired = RetiredEngines(hub.get)
    retired.add([0, 1])                    # the workers, killed for a restart
    assert retired.ids() == {0, 1}
    del hub[0], hub[1]                     # they leave the hub...
    retired.add([0, 1])                    # ...and are retired again: names kept
    assert retired.ids() == {0, 1}
    hub[0], hub[1] = "spare-d", "spare-e"  # the refill's spares, under the same ids
    assert retired.ids() == set()
    retired.add([0])                       # spare-d, once a worker, is retired in turn
    assert retired.ids() == {0}


def test_an_id_never_seen_with_an_engine_stays_retired():
    hub: dict[int, str] = {}
    retired = RetiredEngines(hub.get)
    retired.add([3])
    hub[3] = "someone"
    assert retired.ids() == {3}            # nothing to tell them apart: kept out, as before
