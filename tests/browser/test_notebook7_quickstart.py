"""The quickstart, run all in Notebook 7: the dashboard renders, nothing shows an error
that the tutorial does not make on purpose."""

import os

import pytest
from notebook_page import cell_containing, open_notebook, run_all, wait_until_run

pytestmark = pytest.mark.timeout(400)


def test_quickstart_in_notebook_7(start_app, page, screenshots):
    server = start_app("notebook")
    open_notebook(page, server, "01_quickstart.ipynb")
    run_all(page)
    training = cell_containing(page, "history = model.fit(dataset, epochs=")
    training.locator("img.tfmw-curves").wait_for(state="visible", timeout=180_000)
    training.screenshot(path=os.path.join(screenshots, "dashboard-live.png"))
    wait_until_run(page, 300)
    training.screenshot(path=os.path.join(screenshots, "after-run.png"))
    text = training.inner_text()
    assert "Loading widget" not in text and "Error displaying widget" not in text, text
    assert "10 epochs" in text and training.locator(".jp-OutputArea-output img").count() >= 1
    # Errors only where the tutorial makes them (the typo, the killed worker).
    failing = page.locator(".jp-Cell").filter(
        has=page.locator('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'
                         ', .jp-RenderedText[data-mime-type="application/vnd.jupyter.error"]'))
    sources = [failing.nth(i).locator(".jp-InputArea").inner_text()
               for i in range(failing.count())]
    assert all("model.fitt(" in s or "SIGKILL" in s for s in sources), sources
