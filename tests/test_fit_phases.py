"""The pure parts of benchmarks/fit_phases.py: the stamped job cell, and phases from stamps."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))

from fit_phases import EPOCHS, PHASE_CLOCK, phases, stamped_job  # noqa: E402

pytestmark = pytest.mark.timeout(60)


def test_the_job_cell_gets_the_phase_clock_and_stamps_the_cell():
    job = stamped_job()
    assert "callbacks=[_LoopClock(), _PhaseClock()]" in job
    assert job.startswith("phase_stamps.clear()\n")
    assert job.rstrip().endswith("phase_stamps['cell_end'] = _phase_time.perf_counter()")
    compile(PHASE_CLOCK + job, "<job>", "exec")   # both parse as the workers run them


def test_phases_are_the_differences_between_stamps_in_ms():
    stamps = {"cell_begin": 10.0, "train_begin": 10.1}
    at = 10.1
    for epoch in range(EPOCHS):
        stamps[f"epoch_begin_{epoch}"] = at + 0.002
        stamps[f"epoch_end_{epoch}"] = at + 0.302
        at += 0.31
    stamps["train_end"] = at + 0.001
    stamps["cell_end"] = at + 0.021
    found = phases(stamps)
    assert found["before fit"] == pytest.approx(100.0)
    assert [found[f"epoch {e}"] for e in range(EPOCHS)] == [pytest.approx(300.0)] * EPOCHS
    # From one epoch's end (at + 0.302) to the next one's beginning (at + 0.31 + 0.002).
    assert [found[f"gap {e}"] for e in range(EPOCHS - 1)] == [pytest.approx(10.0)] * (EPOCHS - 1)
    assert found["end"] == pytest.approx(9.0)   # the last epoch's end (+302 ms) -> +311 ms
    assert found["after fit"] == pytest.approx(20.0)
