"""The dashboard of 16 workers in JupyterLab: one line per host under an overview that names
the straggler, each worker's row opened from the host's line while the fit runs.

A scale test (16 TensorFlow workers on this host): run with `pytest -m scale`.
"""

import os
import re

import pytest
from notebook_page import cell_containing, open_notebook, run_all, wait_until_run
from test_lab_kernel_controls import write_notebook

pytestmark = [pytest.mark.scale, pytest.mark.timeout(900)]

WORKERS = 16
CELLS = [
    f"%load_ext tfmw_notebook\n%tfdist start -n {WORKERS}",
    '''%%tfdist
import numpy as np
x = np.random.RandomState(0).normal(size=(4096, 32)).astype("float32")
data = tf.data.Dataset.from_tensor_slices((x, x[:, :1])).repeat().batch(256)
model = tf.keras.Sequential([tf.keras.layers.Input((32,)), tf.keras.layers.Dense(64),
                             tf.keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")''',
    '''%%tfdist --no-checkpoint
model.fit(data, epochs=4, steps_per_epoch=25, verbose=0)''',
]


def test_sixteen_workers_are_summarised_by_host_and_each_shown_on_demand(
        start_app, page, screenshots):
    server = start_app("lab")
    write_notebook(server.root_dir, "scale.ipynb", CELLS)
    open_notebook(page, server, "scale.ipynb")
    run_all(page)
    training = cell_containing(page, "model.fit(data, epochs=4")
    overview = training.locator(".tfmw-progress-overview")
    overview.wait_for(state="visible", timeout=600_000)
    # Wait for a rate: the line then names the straggler the run waits for.
    page.wait_for_function(
        "el => /steps\\/s/.test(el.innerText)", arg=overview.element_handle(), timeout=120_000)
    text = overview.inner_text()
    assert re.match(rf"{WORKERS} workers on 1 host · [\d.]+(-[\d.]+)? steps/s · "
                    r"straggler: worker \d+ on \S+", text), text
    hosts = training.locator(".tfmw-host-progress")
    assert hosts.count() == 1
    assert re.match(rf"\S+ · workers 0-{WORKERS - 1} · ", hosts.first.inner_text()), \
        hosts.first.inner_text()
    rows = training.locator(".tfmw-worker-progress")
    assert rows.count() == 0 or not rows.first.is_visible()     # closed until asked for
    # Opening the host's accordion is the front end's business: it works mid-cell.
    training.locator(".tfmw-host-details").get_by_text("each worker").click()
    rows.first.wait_for(state="visible", timeout=10_000)
    assert rows.count() == WORKERS
    # The rows move while the cell runs (refreshed at most once a second).
    page.wait_for_function("el => /steps\\/s/.test(el.innerText)",
                           arg=rows.nth(WORKERS - 1).element_handle(), timeout=30_000)
    assert "*" in training.locator(".jp-InputPrompt").inner_text()   # still training
    # docs/dashboard-16-workers.png is this picture, cut at the window.
    training.screenshot(path=os.path.join(screenshots, "dashboard-16-workers.png"))
    wait_until_run(page, 600)
    assert "4 epochs" in training.inner_text()
