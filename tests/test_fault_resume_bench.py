"""The pure part of benchmarks/fault_resume.py: each run's fault schedule."""

import os
import random
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))

from fault_resume import KINDS, schedule  # noqa: E402

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("seed", range(50))
def test_a_schedule_has_every_kind_at_steps_the_faults_can_reach(seed):
    steps, kinds, ranks = schedule(random.Random(seed), 4)
    assert sorted(kinds) == sorted(KINDS)
    assert steps == sorted(steps) and steps[0] >= 2 and steps[-1] < 50
    for kind, step, later in zip(kinds, steps, steps[1:]):
        # A write kill lands at the next backup (10 steps on at most); a SIGTERM at the
        # next agreed step: a fault before then would be taken first.
        assert later - step >= {"WRITE": 12, "SIGTERM": 4}.get(kind, 2), (kinds, steps)
    assert all(rank == 0 for kind, rank in zip(kinds, ranks) if kind == "WRITE")
    assert set(ranks) <= {0, 1}


def test_too_many_faults_for_the_fit_are_refused():
    with pytest.raises(ValueError, match="do not fit"):
        schedule(random.Random(0), 20)
