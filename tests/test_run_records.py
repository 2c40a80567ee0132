"""Run records on disk and the runs table, without engines (protocol/records.py,
cluster/runs/run_capture.py, cluster/runs/runs.py, widgets/run_table.py, widgets/runs_view.py)."""

import json
import os

import ipywidgets
import pytest
from tfmw_notebook import Runs, list_runs
from tfmw_notebook.cluster.runs.run_capture import CellRuns, FitCapture
from tfmw_notebook.errors import Failure, WorkerFailed
from tfmw_notebook.protocol import checkpoints, records
from tfmw_notebook.widgets import run_table
from tfmw_notebook.widgets.runs_view import RunsView

from fake_comm import PNG_SIGNATURE, recording_comms  # noqa: F401 (fixture)

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]


def chief_fit(index=1, lr=0.01, losses=(1.0, 0.5), finished=True, **more):
    return {"fit": index, "finished": finished, "epochs": list(range(len(losses))),
            "history": {"loss": list(losses), "val_loss": [v + 0.1 for v in losses]},
            "hyperparameters": {"epochs": len(losses), "batch_size": 32, "optimizer": "Adam",
                                "optimizer_config": {"name": "adam", "learning_rate": lr,
                                                     "beta_1": 0.9},
                                "learning_rate": lr, "loss": "mse", "parameters": 49},
            "wall_time": 2.0, "samples_per_second": 256.0, **more}


def record(name, outcome="completed", **fit):
    return records.make_record(chief_fit(**fit), name=name, source="model.fit(...)", sweep={},
                               cluster={"workers": 2, "hosts": ["h"], "devices": "CPU",
                                        "keras": "Keras 3", "tf_version": "2.21"},
                               checkpoint_dir=None, outcome=outcome)


def save_checkpoint(run_dir, epoch):
    temp = checkpoints.prepare_temp(run_dir, epoch, "t")
    checkpoints.write_meta(temp, {"epoch": epoch, "metrics": {"loss": 1.0 / epoch}})
    return checkpoints.commit(temp, run_dir, epoch)


# -- the store ---------------------------------------------------------------------------


def test_names_count_up_over_what_is_on_disk_and_bad_or_used_names_are_refused(tmp_path):
    root = str(tmp_path)
    assert records.next_run_name(root) == "run-1"
    for name in ("run-2", "run-7.2", "run-20261124-124900", "mine"):
        os.mkdir(tmp_path / name)
    assert records.next_run_name(root) == "run-8"
    assert records.name_problem("lr-0.01", root) == ""
    assert "already used" in records.name_problem("mine", root)
    assert "(run-7.2)" in records.name_problem("run-7", root)   # its second fit's directory
    for bad in ("", "../x", "a/b", ".hidden", "a b", "x."):
        assert "not usable" in records.name_problem(bad, root), bad
    assert records.fit_run_dir("/r/run-3", 1) == "/r/run-3"
    assert records.fit_run_dir("/r/run-3/", 2) == "/r/run-3.2"


def test_a_record_is_written_atomically_beside_the_checkpoint_writers_fields(tmp_path):
    run_dir = str(tmp_path / "run-1")
    checkpoints.ensure_run(run_dir, workers=2, tf_version="2.21")
    created = checkpoints.read_run(run_dir)["created"]
    records.write_record(run_dir, record("run-1"))
    data = json.loads((tmp_path / "run-1" / "run.json").read_text())
    assert data["created"] == created and data["workers"] == 2 and data["outcome"] == "completed"
    assert sorted(os.listdir(run_dir)) == ["run.json"]          # no temp file left
    with pytest.raises(ValueError, match="Expected one of"):
        records.write_record(run_dir, dict(record("run-1"), outcome="exploded"))


def test_a_resumed_run_keeps_the_epochs_before_the_one_it_resumed_at(tmp_path):
    run_dir = str(tmp_path / "run-1")
    records.write_record(run_dir, record("run-1", "interrupted", losses=(1.0, 0.5, 0.4)))
    resumed = record("run-1", "restored", losses=(0.3, 0.2))
    resumed["epochs"] = [2, 3]          # resumed from the checkpoint of epoch 2
    records.write_record(run_dir, resumed)
    again = records.read_record(run_dir)
    assert again["epochs"] == [0, 1, 2, 3] and again["history"]["loss"] == [1.0, 0.5, 0.3, 0.2]
    assert again["outcome"] == "restored"


def test_listing_reads_records_only_and_deleting_takes_the_checkpoints_along(tmp_path):
    root = str(tmp_path)
    for name in ("run-1", "run-2"):
        save_checkpoint(os.path.join(root, name), 1)
        records.write_record(os.path.join(root, name), record(name))
    save_checkpoint(os.path.join(root, "old-run"), 1)          # checkpoints, no record
    (tmp_path / "notes.txt").write_text("mine")
    assert list_runs(root).names() == ["run-1", "run-2"]
    assert list_runs(root).records()[0]["run_dir"] == os.path.join(root, "run-1")
    list_runs(root).delete("run-1")
    assert sorted(os.listdir(root)) == ["notes.txt", "old-run", "run-2"]
    for name in ("run-1", "old-run", "notes.txt", "../run-2"):
        with pytest.raises(ValueError, match="no run named"):
            records.delete_run(root, name)
    assert sorted(os.listdir(root)) == ["notes.txt", "old-run", "run-2"]


def test_to_dataframe_has_a_row_per_run():
    pandas = pytest.importorskip("pandas")
    runs = Runs("/r", [record("run-1"), record("run-2", lr=0.1)])
    frame = runs.to_dataframe()
    assert isinstance(frame, pandas.DataFrame) and list(frame.index) == ["run-1", "run-2"]
    assert list(frame["learning_rate"]) == [0.01, 0.1] and list(frame["loss final"]) == [0.5, 0.5]


def test_list_runs_refuses_a_root_that_is_not_a_path():
    with pytest.raises(ValueError, match="Expected a directory path"):
        list_runs(3)


# -- how a fit ended ---------------------------------------------------------------------


@pytest.mark.parametrize("cell, finished, raised, expected", [
    ("completed", True, False, "completed"),
    ("restored", True, False, "restored"),
    ("failed", True, False, "completed"),       # the cell failed after this fit
    ("failed", True, True, "failed"),           # another rank's fit raised
    ("failed", False, False, "failed"),
    ("interrupted", False, False, "interrupted"),
    ("interrupted", True, False, "completed"),
])
def test_fit_outcome(cell, finished, raised, expected):
    assert records.fit_outcome({"finished": finished}, cell, raised) == expected


def test_capture_keeps_the_chiefs_records_and_every_ranks_raised_flags(tmp_path):
    forwarded = []
    capture = FitCapture(lambda rank, data: forwarded.append(rank))
    attempt = {records.run_key(1): chief_fit(1), records.run_key(2): chief_fit(2)}
    capture.on_data(0, attempt)
    capture.on_data(1, {records.raised_key(2): True, records.run_key(1): {"fit": 9}})
    assert [f["fit"] for f in capture.fits()] == [1, 2] and capture.raised == {2}
    capture.on_data(0, {records.run_key(1): chief_fit(1, lr=0.5)})   # a new attempt
    assert [f["hyperparameters"]["learning_rate"] for f in capture.fits()] == [0.5]
    assert forwarded == [0, 1, 0]
    runs = CellRuns(root=str(tmp_path), run_dir=None, name=None, source="fit", capture=capture,
                    cluster={"workers": 2})
    failure = WorkerFailed(Failure("interrupted: training was stopped", kind="interrupt"))
    written = runs.write(0, None, failure)
    assert written == [str(tmp_path / "run-1")]
    assert records.read_record(written[0])["outcome"] == "completed"   # its fit had finished
    assert runs.write(0, None, None) == [str(tmp_path / "run-2")]
    assert CellRuns(root=str(tmp_path), run_dir=None, name="x", source="").write(0, [], None) \
        == []                                                           # no fit, no run


# -- the table and the browser -----------------------------------------------------------


def test_table_columns_are_the_differing_hyperparameters_and_final_and_best_metrics():
    runs = [record("run-1", losses=(1.0, 0.2, 0.4)), record("run-2", lr=0.1, losses=(0.9, 0.8))]
    columns, rows = run_table.table(runs)
    assert columns == ["name", "outcome", "epochs done", "wall time", "samples/s", "epochs",
                       "learning_rate", "loss final", "loss best", "val_loss final",
                       "val_loss best"]
    assert rows[0]["epochs done"] == 3 and rows[1]["epochs"] == 2
    assert "optimizer" not in columns and "batch_size" not in columns   # the same in both
    assert {"learning_rate", "loss final", "loss best", "val_loss best"} <= set(columns)
    assert rows[0]["loss final"] == 0.4 and rows[0]["loss best"] == 0.2
    by_loss = run_table.sort_rows(rows, "loss final")
    assert [r["name"] for r in by_loss] == ["run-1", "run-2"]
    assert [r["name"] for r in run_table.sort_rows(rows, "loss final", True)] == ["run-2", "run-1"]
    assert run_table.differing([runs[0]]) == []
    assert records.final_and_best([0.5, 0.9, 0.7], "val_accuracy") == (0.7, 0.9)


def test_browser_redraws_for_the_runs_selected_and_acts_on_one(tmp_path):
    runs = [record("run-1"), record("run-2", lr=0.1, losses=(2.0, 1.5)), record("run-3")]
    deleted = []
    view = RunsView(runs, {"delete": lambda r: deleted.append(r["name"]) or "gone",
                           "checkpoints": lambda r: ipywidgets.Label(r["name"])})
    assert isinstance(view.widget, ipywidgets.VBox) and view.metric.value == "val_loss"
    first = bytes(view.image.value)
    assert first.startswith(PNG_SIGNATURE) and view.runs.value == ("run-1", "run-2", "run-3")
    view.select("run-1", "run-2")
    assert bytes(view.image.value) != first and view.redraws == 2
    view.buttons["checkpoints"].click()
    assert "select one run (now 2)" in view.status.value and deleted == []
    view.select("run-2")
    view.buttons["checkpoints"].click()
    assert view.detail.children[0].value == "run-2"
    view.buttons["delete"].click()                    # asks once more; deletes nothing yet
    assert deleted == [] and view.buttons["delete"].description == "Confirm: delete the run"
    assert 'press “Confirm: delete the run” to remove run-2' in view.status.value
    view.select("run-3")                              # another run: asks again
    view.select("run-2")
    view.buttons["delete"].click()
    assert deleted == []
    view.buttons["delete"].click()
    assert deleted == ["run-2"] and view.runs.options == ("run-1", "run-3")
    assert "run-2" not in view.table.value and view.status.value == "gone"
    view.sort("name", descending=True)
    assert [r["name"] for r in view.rows()] == ["run-3", "run-1"]
    assert view.table.value.index("run-3") < view.table.value.index("run-1")
    assert 'src="data:image/png;base64,' in view.static_html()
    with pytest.raises(ValueError, match="no run 'run-9'"):
        view.select("run-9")


def test_a_fit_run_again_after_a_restart_keeps_the_epochs_of_the_attempt_before():
    capture = FitCapture()
    capture.on_data(0, {records.run_key(1): chief_fit(1, losses=(1.0, 0.8), finished=False)})
    again = chief_fit(1, losses=(0.7, 0.6, 0.5))
    again["epochs"] = [1, 2, 3]          # resumed from the backup of epoch 1
    capture.on_data(0, {records.run_key(1): again})
    (fit,) = capture.fits([again])
    assert fit["epochs"] == [0, 1, 2, 3] and fit["history"]["loss"] == [1.0, 0.7, 0.6, 0.5]
    assert fit["wall_time"] == 4.0 and fit["finished"]
    capture.on_data(0, {})               # a third attempt that failed before its fit
    assert capture.fits()[0]["epochs"] == [0, 1, 2, 3]


def test_runs_for_code_show_the_table_and_figure_and_say_when_pandas_is_missing(monkeypatch):
    import base64
    import sys

    runs = Runs("/r", [record("run-1"), record("run-2", lr=0.1)])
    bundle = runs._repr_mimebundle_()
    assert bundle["text/plain"] == "2 runs under /r: run-1, run-2"
    assert 'class="tfmw-runs-table"' in bundle["text/html"] and ">run-2<" in bundle["text/html"]
    assert base64.b64decode(bundle["image/png"]).startswith(PNG_SIGNATURE)
    assert "application/vnd.jupyter.widget-view+json" not in bundle
    assert Runs("/r", [])._repr_mimebundle_() == {"text/plain": "no runs under /r"}
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ImportError, match=r"^to_dataframe\(\) needs pandas: pip install pandas"):
        runs.to_dataframe()


def test_the_chiefs_facts_of_a_model_are_plain_data():
    import numpy as np
    from tfmw_notebook.worker.experiments import run_facts

    class Adam:
        learning_rate = np.float32(0.5)

        def get_config(self):
            return {"name": "adam", "learning_rate": {"class_name": "ExponentialDecay"},
                    "beta_1": np.float32(0.9), "clipnorm": None, "weird": object()}

    def huber(y, p):
        return y

    class Model:
        optimizer, loss = Adam(), huber

        def count_params(self):
            return np.int64(49)

    facts = run_facts.model_facts(Model())
    assert facts["optimizer"] == "Adam" and facts["loss"] == "huber" and facts["parameters"] == 49
    assert facts["learning_rate"] == "ExponentialDecay"
    assert facts["optimizer_config"]["beta_1"] == pytest.approx(0.9)
    assert facts["optimizer_config"]["weird"].startswith("<")
    json.dumps(facts)
    assert run_facts.fit_arguments({"epochs": 3, "batch_size": None}, validation=False,
                                   global_batch=64) == {"epochs": 3, "validation": False,
                                                        "batch_size": 64}
    assert run_facts.loss_name({"out": "mse"}) == "out: mse"
    assert run_facts.plain(float("nan")) == "nan"
