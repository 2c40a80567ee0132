"""benchmarks/experiments_*.py: the summaries, ratios and verdicts of their rows (pure)."""

from __future__ import annotations

import os
import sys

import pytest

BENCHMARKS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          "benchmarks")
sys.path.insert(0, BENCHMARKS)

from tfmw_bench.record_cost import summarize_record  # noqa: E402
from tfmw_bench.sweep_contenders import summarize_sweep, sweep_job  # noqa: E402

pytestmark = pytest.mark.unit


def record_round(without: float, with_: float, *, pairs: int = 3) -> dict:
    return {"without": [without] * pairs, "with": [with_] * pairs,
            "without_loops": [without - 0.2] * pairs, "with_loops": [with_ - 0.2] * pairs,
            "without_fits": [without - 0.1] * pairs, "with_fits": [with_ - 0.1] * pairs,
            "callback": [0.009] * pairs, "epoch_end": [0.0007] * 10 * pairs,
            "write": [0.002] * pairs}


def test_recording_within_one_percent_is_ok_and_its_costs_are_in_ms():
    rounds = [record_round(5.00 + k / 100, 5.01 + k / 100) for k in range(6)]
    s = summarize_record(rounds)
    assert s["ratios"]["cell"] == pytest.approx(5.035 / 5.025)
    assert s["goals"]["record_cell"]["met"] is True
    assert s["goals"]["record_loop"]["met"] is True
    assert s["callback_ms"]["median"] == pytest.approx(9.0)
    assert s["write_ms"]["median"] == pytest.approx(2.0)
    assert s["epoch_end_ms"]["n"] == 6 * 3 * 10   # rounds x pairs x epochs
    # (9 ms + 2 ms) over the recording side's model.fit
    assert s["own_share"]["max"] == pytest.approx(0.011 / 4.91)


def test_recording_that_costs_five_percent_is_missed():
    s = summarize_record([record_round(5.0 + k / 100, 5.25 + k / 100) for k in range(6)])
    assert s["goals"]["record_cell"]["met"] is False
    assert s["goals"]["record_cell"]["value"] == pytest.approx(5.25 / 5.00)   # fast modes


def test_recording_verdict_is_withheld_below_three_rounds_or_when_it_straddles():
    assert summarize_record([record_round(5.0, 5.0)] * 2)["goals"]["record_cell"]["met"] is None
    # One fast round among slow ones: resamples with it say ok, those without it missed.
    straddling = [record_round(5.0, w) for w in (4.95, 5.2, 5.25, 5.3, 5.2, 5.15)]
    assert summarize_record(straddling)["goals"]["record_cell"]["met"] is None


def sweep_round(tfmw: float | None, floor: float | None, ray: float | None = None) -> dict:
    entry: dict = {}
    if tfmw is not None:
        entry["tfmw"] = {"wall": tfmw, "trials": [tfmw / 6] * 6}
    if floor is not None:
        entry["floor"] = {"wall": floor, "trials": [floor / 6] * 6}
    if ray is not None:
        entry["ray"] = {"wall": ray, "init": 5.0}
    return entry


def test_sweep_ratios_and_verdict_against_the_floor():
    rounds = [sweep_round(8.0 + k / 10, 40.0 + k, 300.0 if k == 0 else None) for k in range(4)]
    s = summarize_sweep(rounds)
    assert s["ratios"]["floor"] == pytest.approx(8.15 / 41.5)
    assert s["ratios"]["ray"] == pytest.approx(8.15 / 300.0)
    assert s["goals"]["sweep_floor"]["met"] is True
    assert s["tfmw_trial"]["n"] == 24 and s["ray_init"]["median"] == 5.0


def test_sweep_rounds_with_a_failed_side_are_left_out_of_the_verdict():
    rounds = [sweep_round(50.0, 40.0), sweep_round(None, 40.0), sweep_round(52.0, 41.0),
              sweep_round(51.0, 39.0)]
    s = summarize_sweep(rounds)
    assert s["goals"]["sweep_floor"]["n"] == 3
    assert s["goals"]["sweep_floor"]["met"] is False
    assert s["ratios"]["ray"] is None


def test_sweep_job_reads_the_learning_rate_from_lr():
    job = sweep_job(2, 5)
    assert "SGD(learning_rate=lr)" in job and "learning_rate=0.01" not in job
