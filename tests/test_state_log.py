"""Pure parts of keeping state: the log a restore replays, its report line, NameError hints."""

import os
import types

import pytest
from tfmw_notebook.cluster.cells.state_log import (
    FitRecord,
    RestoreReport,
    StateLog,
    merge_fit_records,
)
from tfmw_notebook.magics.hints import missing_name_hint

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]


def record(path, source="snapshot", loss=(1.0, 0.5)):
    return {"history": {"loss": list(loss)}, "params": {"epochs": len(loss), "steps": 4},
            "epoch": list(range(len(loss))), "source": source, "path": path}


def test_merge_takes_the_chiefs_history_and_every_ranks_path():
    merged = merge_fit_records([[record("/s/r0", loss=(2.0, 1.0))],
                                [record("/s/r1", loss=(9.0, 9.0))]])
    assert merged == (FitRecord(history={"loss": [2.0, 1.0]}, params={"epochs": 2, "steps": 4},
                                epoch=[0, 1], source="snapshot", paths=("/s/r0", "/s/r1")),)
    assert merged[0].for_worker()["paths"] == ["/s/r0", "/s/r1"]


def test_merge_keeps_fit_order_and_a_rank_that_recorded_less():
    merged = merge_fit_records([[record("/a0"), record("/b0", source="checkpoint")],
                                [record("/a1")]])
    assert [m.paths for m in merged] == [("/a0", "/a1"), ("/b0", None)]
    assert [m.source for m in merged] == ["snapshot", "checkpoint"]


def test_a_fit_that_raised_has_no_state_to_restore():
    failed = {"history": {}, "params": {}, "epoch": [], "source": None, "path": None}
    merged = merge_fit_records([[failed], [failed]])
    assert merged[0].source is None and merged[0].paths == (None, None)
    assert merge_fit_records([]) == ()


def test_log_keeps_pushes_and_cells_in_order():
    log = StateLog()
    log.add_push({"lr": 0.1})
    log.add_cell("a = 1")
    log.add_cell("model.fit(...)", merge_fit_records([[record("/x")]]))
    kept = log.snapshot()
    log.clear()
    assert [step.kind for step in kept] == ["push", "cell", "cell"]
    assert kept[0].payload == {"lr": 0.1} and len(kept[2].fits) == 1
    assert log.cells == 0
    for step in kept:
        log.add(step)
    assert log.cells == 2


def test_report_line():
    assert RestoreReport(cells=3, fits_restored=2, seconds=1.234).line() == (
        "restored 3 cells in 1.2 s (2 fits restored from checkpoints)")
    assert RestoreReport(cells=1, fits_restored=1, seconds=0.5).line() == (
        "restored 1 cell in 0.5 s (1 fit restored from checkpoints)")
    line = RestoreReport(cells=1, fits_restored=0, fits_rerun=1, seconds=2.0, failed_cell=2,
                         error="worker 0 failed: KeyError: 'x'").line()
    assert "1 trained again: no saved state" in line
    assert "replaying cell 2 failed (worker 0 failed: KeyError: 'x')" in line


def test_hint_for_a_notebook_variable():
    hint = missing_name_hint("NameError", "name 'rate' is not defined", {"rate": 0.1})
    assert hint == ("`rate` is defined in this notebook but not on the workers: `import` it "
                    "in a %%tfdist cell, or pass `--push rate`")


def test_hint_for_a_module_suggests_the_import_line():
    assert "add `import os` to a %%tfdist cell" in missing_name_hint(
        "NameError", "name 'os' is not defined", {"os": os})
    alias = types.ModuleType("numpy")
    assert "add `import numpy as np`" in missing_name_hint(
        "NameError", "name 'np' is not defined. Did you mean: 'nn'?", {"np": alias})


def test_no_hint_when_the_notebook_lacks_the_name_or_the_error_is_another():
    assert missing_name_hint("NameError", "name 'x' is not defined", {}) is None
    assert missing_name_hint("KeyError", "name 'x' is not defined", {"x": 1}) is None
    assert missing_name_hint("NameError", "free variable 'x' referenced", {"x": 1}) is None


def test_unshared_directory_hint_names_the_hosts_of_the_workers_that_lack_it():
    from tfmw_notebook.magics.hints import unshared_hosts_hint

    hosts = ["node1", "node1", "node2", "node2"]
    value = "workers 2, 3 do not see /data/run-1, where the chief (worker 0) saves checkpoints"
    hint = unshared_hosts_hint("RunDirNotShared", value, hosts)
    assert hint.startswith("on node2 that directory is missing") and "(node1)" in hint
    assert unshared_hosts_hint("ValueError", value, hosts) is None
    assert unshared_hosts_hint("RunDirNotShared", "something else", hosts) is None


def test_sweep_removes_the_temp_dirs_of_dead_workers_only(tmp_path, monkeypatch):
    import os
    import subprocess
    import sys
    import tempfile

    from tfmw_notebook.protocol import tempdirs

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    os_pid = str(os.getpid())
    for pid in (dead, os_pid):
        (tmp_path / f"tfmw-worker-{pid}").mkdir()
    (tmp_path / "tfmw-worker-notapid").mkdir()
    assert tempdirs.sweep_stale() == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"tfmw-worker-{os_pid}",
                                                           "tfmw-worker-notapid"]


def test_hint_for_a_worker_that_cannot_reach_out_of_its_private_network():
    from tfmw_notebook.magics.hints import private_network_hint

    for said in ("URLError: <urlopen error [Errno -3] Temporary failure in name resolution>",
                 "OSError: [Errno 101] Network is unreachable",
                 "Exception: URL fetch failure on https://x/y.npz: None -- [Errno -2] Name or "
                 "service not known"):
        hint = private_network_hint(said, private=True)
        assert hint and "--no-isolation" in hint and "private network" in hint, said
        assert private_network_hint(said, private=False) is None   # a real network problem
    assert private_network_hint("ValueError: Errno 101 is a number", private=True) is None


def test_a_step_without_kept_state_trains_its_fits_again_when_replayed():
    log = StateLog()
    log.add_push({"x": 1})
    log.add_cell("model.fit(x)", merge_fit_records([[record("/s/r0")], [record("/s/r1")]]))
    push, cell = [step.without_kept_state() for step in log.snapshot()]
    assert push == log.steps[0]
    assert cell.payload == "model.fit(x)" and len(cell.fits) == 1
    assert cell.fits[0].source is None and cell.fits[0].paths == ()
    assert cell.fits[0].history == {"loss": [1.0, 0.5]}      # the History is kept
    assert log.steps[1].fits[0].source == "snapshot"          # the log itself is unchanged


def test_the_report_says_why_fits_trained_again():
    assert RestoreReport(cells=1, fits_rerun=1).line().endswith(
        "1 trained again: no saved state)")
    assert RestoreReport(cells=1, fits_rerun=1, rerun_reason="another reason").line().endswith(
        "1 trained again: another reason)")
