"""`%tfdist runs` in JupyterLab 4: the runs browser renders, selecting two runs redraws
the figure, a run's checkpoints are one click away, and the saved notebook keeps the
table and the figure.

The runs are written to disk as records (the kernel tests make them from real fits):
the browser needs no cluster."""

import json
import os
import time

import nbformat
import pytest
from notebook_page import (
    cell_containing,
    open_notebook,
    run_all,
    save,
    wait_for,
    wait_until_run,
)
from tfmw_notebook.protocol import checkpoints, records

pytestmark = pytest.mark.timeout(300)

RUNS_CELL = "%tfdist runs"


def write_runs(root):
    for number, (rate, losses) in enumerate(((0.01, [1.0, 0.6, 0.4]), (0.1, [1.2, 0.9, 0.8]),
                                             (0.001, [1.1, 1.0, 0.95])), start=1):
        run_dir = os.path.join(root, f"run-{number}")
        temp = checkpoints.prepare_temp(run_dir, 3, "t")
        checkpoints.write_meta(temp, {"epoch": 3, "metrics": {"loss": losses[-1]}})
        checkpoints.commit(temp, run_dir, 3)
        records.write_record(run_dir, records.make_record(
            {"fit": 1, "epochs": [0, 1, 2], "history": {"loss": losses},
             "hyperparameters": {"learning_rate": rate, "epochs": 3}},
            name=f"run-{number}", source="model.fit(...)", sweep={},
            cluster={"workers": 2}, checkpoint_dir=run_dir, outcome="completed"))


def test_select_two_runs_and_the_figure_changes(start_app, page, screenshots):
    server = start_app("lab")
    write_runs(os.path.join(server.root_dir, "tfdist_checkpoints"))
    notebook = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("%load_ext tfmw_notebook"),
        nbformat.v4.new_code_cell(RUNS_CELL)], metadata={"kernelspec": {
            "name": "python3", "display_name": "Python 3", "language": "python"}})
    nbformat.write(notebook, os.path.join(server.root_dir, "runs.ipynb"))
    open_notebook(page, server, "runs.ipynb")
    run_all(page)
    wait_until_run(page, 90)
    view = cell_containing(page, RUNS_CELL).locator(".tfmw-runs")
    view.wait_for(state="visible", timeout=60_000)
    figure = view.locator("img.tfmw-runs-curves")
    figure.wait_for(state="visible", timeout=30_000)
    assert view.locator("table.tfmw-runs-table tr.tfmw-run-row").count() == 3
    # The static twin (for the saved notebook) is there, hidden beside the live browser.
    static = cell_containing(page, RUNS_CELL).locator(".tfmw-runs-static")
    assert static.count() == 1 and not static.is_visible()
    before = figure.get_attribute("src")
    view.screenshot(path=os.path.join(screenshots, "all-runs.png"))

    view.locator(".tfmw-runs-select select").select_option(["run-1", "run-3"])
    assert changed(lambda: figure.get_attribute("src"), before, 30), "the figure did not change"
    view.screenshot(path=os.path.join(screenshots, "two-runs.png"))

    view.locator(".tfmw-runs-select select").select_option(["run-2"])
    view.get_by_role("button", name="Checkpoints of the run").click()
    picker = view.locator(".tfmw-picker")
    picker.wait_for(state="visible", timeout=30_000)
    assert "ckpt-000003" in picker.locator("select").inner_text()
    view.screenshot(path=os.path.join(screenshots, "checkpoints.png"))

    save(page)
    saved = json.load(open(os.path.join(server.root_dir, "runs.ipynb")))
    static, browser = [cell for cell in saved["cells"]
                       if RUNS_CELL in "".join(cell["source"])][0]["outputs"]
    assert "application/vnd.jupyter.widget-view+json" in browser["data"]
    html = "".join(static["data"]["text/html"])
    assert 'class="tfmw-runs-table"' in html and ">run-2<" in html
    assert 'src="data:image/png;base64,' in html and static["data"]["image/png"]

    # Reopened without its kernel (the browser's widgets are gone): the table and figure show.
    page.evaluate("() => window.jupyterapp.serviceManager.sessions.shutdownAll()")
    page.reload()
    static = cell_containing(page, RUNS_CELL).locator(".tfmw-runs-static")
    static.locator("table.tfmw-runs-table").wait_for(state="visible", timeout=60_000)
    assert static.locator("img.tfmw-runs-figure").is_visible()
    cell_containing(page, RUNS_CELL).screenshot(path=os.path.join(screenshots, "reopened.png"))
    # The reload started a new kernel: let it come up, then end it (the server stops faster).
    wait_for(page, lambda s: s["kernel"] == "idle", 60, "the new kernel")
    page.evaluate("() => window.jupyterapp.serviceManager.sessions.shutdownAll()")


def changed(read, before, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if read() != before:
            return True
        time.sleep(0.2)
    return False
