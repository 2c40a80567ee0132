"""The quickstart, run all in JupyterLab 4: the live dashboard is a picture that moves."""

import json
import os

import pytest
from notebook_page import cell_containing, open_notebook, run_all, save, wait_until_run

pytestmark = pytest.mark.timeout(400)


def test_quickstart_in_jupyterlab_shows_a_live_dashboard_and_keeps_its_figure(
        start_app, page, screenshots):
    server = start_app("lab")
    open_notebook(page, server, "01_quickstart.ipynb")
    run_all(page)
    training = cell_containing(page, "history = model.fit(dataset, epochs=")
    curves = training.locator("img.tfmw-curves")
    # The live image is hidden until its first drawing (no broken-image icon): it shows
    # while the fit still runs, the cell's prompt still [*].
    curves.wait_for(state="visible", timeout=180_000)
    assert "*" in training.locator(".jp-InputPrompt").inner_text()
    curves.screenshot(path=os.path.join(screenshots, "curves-live.png"))
    training.screenshot(path=os.path.join(screenshots, "dashboard-live.png"))
    text = training.inner_text()
    assert "Loading widget" not in text and "Error displaying widget" not in text, text
    assert training.locator(".tfmw-worker-progress").count() == 2
    wait_until_run(page, 300)
    training.screenshot(path=os.path.join(screenshots, "after-run.png"))
    assert training.locator(".jp-OutputArea-output img").count() >= 1   # the static figure
    assert "10 epochs" in training.inner_text()
    save(page)
    with open(os.path.join(server.root_dir, "01_quickstart.ipynb")) as saved:
        notebook = json.load(saved)
    cell = next(c for c in notebook["cells"]
                if "history = model.fit(dataset, epochs=" in "".join(c["source"]))
    assert any("image/png" in out.get("data", {}) for out in cell["outputs"]), cell["outputs"]
