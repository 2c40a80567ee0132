"""A SIGTERM's fate on a worker (preemption.py) and `--grace`'s default and `off`."""

import threading

import pytest
from tfmw_notebook.magics.parsers import CELL_PARSER
from tfmw_notebook.protocol.run_options import DEFAULT_GRACE, BackupPolicy
from tfmw_notebook.worker.fits import preemption

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def fresh_state(monkeypatch):
    monkeypatch.setattr(preemption, "_state", preemption._Preemption())
    yield
    if preemption._state.deadline is not None:
        preemption._state.deadline.cancel()


def test_preemption_is_on_by_default_and_off_turns_it_off():
    assert DEFAULT_GRACE == 25.0
    assert BackupPolicy(directory="d").grace == 25.0
    assert CELL_PARSER.parse_args(["--max-restarts", "1"]).grace == 25.0
    assert CELL_PARSER.parse_args(["--grace", "off"]).grace is None
    assert CELL_PARSER.parse_args(["--grace", "5"]).grace == 5.0


def test_a_sigterm_outside_an_armed_fit_ends_the_worker_at_once():
    ended = []
    preemption.on_sigterm(lambda: ended.append(True))
    assert ended == [True]


def test_a_sigterm_after_the_fits_last_step_lets_the_cell_end_then_the_worker_ends():
    """After the fit returned the signal is still kept: the cell goes on, its end says so,
    and the process ends at the grace period's end."""
    ended = threading.Event()
    preemption.arm(0.3)                    # a fit armed it and returned; the cell goes on
    preemption.on_sigterm(ended.set)
    assert not ended.is_set()
    notice = preemption.cell_ended()
    assert "after its fit's last agreed step: the cell ran to its end" in notice
    assert "within 0.3 s" in notice
    assert ended.wait(5), "the grace period's end did not end the worker"
    again = []
    preemption.on_sigterm(lambda: again.append(True))   # a later cell: at once again
    assert again == [True]


def test_a_sigterm_the_fit_backed_up_for_gets_no_notice_at_the_cells_end():
    preemption.arm(30.0)
    preemption.on_sigterm(lambda: None)
    assert preemption.requested()
    preemption.answered()                  # every worker backed up; the fit raises
    assert preemption.cell_ended() == ""


def test_a_cell_without_a_signal_ends_quietly_and_disarmed():
    preemption.arm(30.0)
    assert preemption.cell_ended() == ""
    ended = []
    preemption.on_sigterm(lambda: ended.append(True))
    assert ended == [True]
