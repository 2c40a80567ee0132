"""What the resume line says of the shuffle orders given back (input_orders.py)."""

import pytest
from tfmw_notebook.worker.fits import input_orders
from tfmw_notebook.worker.fits.input_position import Replay

pytestmark = pytest.mark.unit


def test_a_replayed_fit_whose_input_is_not_the_shuffled_pipeline_it_was_is_named_once():
    input_orders.take_report()
    counts = {"x": {"iterators": 1, "repeats": True, "batches": 50}}
    input_orders.give_back({"x": [1, 2, 3]}, counts)
    input_orders.give_back({}, counts)
    line = Replay(batches=20, seconds=0.1).line()
    assert line == ("; its input could not be put back where it was (the fit's `x` in the "
                    "replayed cell is not the shuffled pipeline it was, so the orders it "
                    "drew from were not drawn again)")
    # said once: the next resume line is the plain one
    assert Replay(batches=20, seconds=0.1).line() == (
        "; its input goes on where it was (20 batches read again in 0.1 s)")


def test_a_fit_with_no_shuffled_input_keeps_no_counts():
    with input_orders.counting(None, {"x": [1, 2], "validation_data": None}):
        pass
    assert input_orders.last_counts() == {}
    assert not input_orders.reshuffles(None)
