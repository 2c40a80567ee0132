"""A resize in JupyterLab 4: `%tfdist resize -n 3` says what it did in one line, and the next
fit's live dashboard follows three workers (docs/resize-dashboard.png is this picture)."""

import os

import pytest
from notebook_page import cell_containing, open_notebook, run_all, wait_until_run
from test_lab_kernel_controls import write_notebook

pytestmark = pytest.mark.timeout(500)

CELLS = [
    "%load_ext tfmw_notebook\n%tfdist start -n 2",
    '''%%tfdist
import numpy as np
x = np.random.RandomState(0).normal(size=(2048, 16)).astype("float32")
data = tf.data.Dataset.from_tensor_slices((x, x[:, :1])).repeat().batch(64)
model = tf.keras.Sequential([tf.keras.layers.Input((16,)), tf.keras.layers.Dense(64),
                             tf.keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
model.fit(data, epochs=2, steps_per_epoch=20, verbose=0)''',
    "%tfdist resize -n 3",
    '''%%tfdist
history = model.fit(data, epochs=12, steps_per_epoch=40, verbose=0)''',
]


def test_the_dashboard_after_a_resize_follows_the_new_workers(start_app, page, screenshots):
    server = start_app("lab")
    write_notebook(server.root_dir, "resize.ipynb", CELLS)
    open_notebook(page, server, "resize.ipynb")
    run_all(page)
    resize = cell_containing(page, "%tfdist resize -n 3")
    training = cell_containing(page, "history = model.fit(data, epochs=12")
    rows = training.locator(".tfmw-worker-progress")
    rows.nth(2).wait_for(state="visible", timeout=300_000)
    # A rate on the third worker's row: it trains, with the others, mid-cell.
    page.wait_for_function("el => /steps\\/s/.test(el.innerText)",
                           arg=rows.nth(2).element_handle(), timeout=120_000)
    assert "*" in training.locator(".jp-InputPrompt").inner_text()   # still training
    assert rows.count() == 3
    said = resize.locator(".jp-OutputArea").inner_text()
    assert "resized: 3 workers (were 2)" in said and "1 fit restored" in said, said
    training.locator("img.tfmw-curves").wait_for(state="visible", timeout=120_000)
    # docs/resize-dashboard.png: the resize's line and the dashboard of the fit after it.
    resize.evaluate("el => el.scrollIntoView({block: 'start'})")
    top, end = resize.bounding_box(), training.bounding_box()
    page.screenshot(path=os.path.join(screenshots, "resize-dashboard.png"), clip={
        "x": top["x"], "y": top["y"], "width": end["width"],
        "height": min(end["y"] + end["height"], page.viewport_size["height"]) - top["y"]})
    wait_until_run(page, 300)
    assert "12 epochs" in training.inner_text()
