"""The checkpoint picker of notebooks/03_checkpoints_and_faults.ipynb in JupyterLab 4:
it renders, and each button, clicked, does what it says (checked from the kernel)."""

import os

import pytest
from notebook_page import cell_containing, command, open_notebook, wait_for

pytestmark = pytest.mark.timeout(500)

PICKER_CELL = "%tfdist checkpoints tfdist_checkpoints/tutorial-03"
RUN_DIR = "tfdist_checkpoints/tutorial-03"
DIGESTS = '''import hashlib, os, tfmw_notebook
cluster = tfmw_notebook.active_cluster()
on_workers = cluster.calls.weights_digests([w.engine_id for w in cluster.workers], "model")
saved = tfmw_notebook.load_checkpoint(os.path.join({run!r}, {name!r}))
print("workers agree:", on_workers[0] == on_workers[1],
      "| equal to {name}:", on_workers[0] == hashlib.sha256(
          b"".join(w.tobytes() for w in saved.get_weights())).hexdigest())'''


def run_up_to(page, text):
    """Run every cell up to and including the one whose source holds `text` (as "Run All
    Above" from the cell after it), until the last of them ends."""
    index = page.evaluate("""(text) => {
        const panel = window.jupyterapp.shell.currentWidget;
        const cells = panel.content.model.cells;
        for (let i = 0; i < cells.length; i++) {
            if (cells.get(i).sharedModel.getSource().includes(text)) {
                panel.content.activeCellIndex = i + 1;
                return i;
            }
        }
        return -1;
    }""", text)
    assert index >= 0, text
    command(page, "notebook:run-all-above")     # resolves when the last cell has run


def run_new_cell(page, source, seconds=180):
    """Add a cell at the end, run it, return its output text."""
    page.evaluate("""(source) => {
        const panel = window.jupyterapp.shell.currentWidget;
        const model = panel.content.model;
        model.sharedModel.insertCell(model.cells.length, {cell_type: 'code', source});
        panel.content.activeCellIndex = model.cells.length - 1;
    }""", source)
    command(page, "notebook:run-cell")
    wait_for(page, lambda s: not s["running"] and s["kernel"] == "idle", seconds, "the cell")
    return page.locator(".jp-Notebook .jp-Cell").last.locator(".jp-OutputArea").inner_text()


def test_the_picker_s_buttons_do_what_they_say(start_app, page, screenshots):
    server = start_app("lab")
    open_notebook(page, server, "03_checkpoints_and_faults.ipynb")
    run_up_to(page, PICKER_CELL)
    picker = cell_containing(page, PICKER_CELL)
    rows = picker.locator("select")
    rows.wait_for(state="visible", timeout=60_000)
    picker.locator("img.tfmw-curves").wait_for(state="visible", timeout=60_000)
    text = picker.inner_text()
    assert "Loading widget" not in text and "Error displaying widget" not in text, text
    picker.screenshot(path=os.path.join(screenshots, "picker.png"))
    labels = rows.locator("option").all_inner_texts()
    assert len(labels) >= 2, labels
    # The oldest checkpoint: the workers' model (trained to the end) differs from it.
    oldest = labels[-1].split()[0]     # "ckpt-000004 · epoch 4 · ..." (no-break spaces)
    before = run_new_cell(page, DIGESTS.format(run=RUN_DIR, name=oldest))
    assert "workers agree: True | equal to " + oldest + ": False" in before, before

    rows.select_option(index=len(labels) - 1)
    status = picker.locator(".widget-html").last

    picker.get_by_role("button", name="Restore on workers").click()
    wait_for(page, lambda s: s["kernel"] == "idle" and "restored" in status.inner_text(), 60,
             "the restore")
    assert f"restored {oldest} into 'model' on 2 workers" in status.inner_text()
    picker.screenshot(path=os.path.join(screenshots, "after-restore.png"))
    after = run_new_cell(page, DIGESTS.format(run=RUN_DIR, name=oldest))
    assert "workers agree: True | equal to " + oldest + ": True" in after, after

    picker.get_by_role("button", name="Load into notebook").click()
    wait_for(page, lambda s: s["kernel"] == "idle" and "loaded" in status.inner_text(), 60,
             "the load")
    assert f"loaded {oldest} into `checkpoint_model`" in status.inner_text()
    loaded = run_new_cell(page, "print(checkpoint_model._tfmw_checkpoint['epoch'])")
    assert loaded.strip() == oldest.split("-")[1].lstrip("0"), loaded

    picker.get_by_role("button", name="Resume training from here").click()
    wait_for(page, lambda s: s["kernel"] == "idle" and "resumes from" in status.inner_text(),
             60, "the resume")
    picker.screenshot(path=os.path.join(screenshots, "after-resume.png"))
    resumed = run_new_cell(page, f"%%tfdist --checkpoint-dir {RUN_DIR}\n"
                                 "history = model.fit(train, epochs=8, steps_per_epoch=16, "
                                 "verbose=0)", seconds=240)
    assert f"resumed from {oldest}" in resumed, resumed

    path = os.path.join(server.root_dir, RUN_DIR, oldest)
    assert os.path.isdir(path)
    labels = rows.locator("option").all_inner_texts()
    rows.select_option(index=next(i for i, label in enumerate(labels)
                                  if label.startswith(oldest)))
    picker.get_by_role("button", name="Delete", exact=True).click()
    wait_for(page, lambda s: s["kernel"] == "idle" and "Confirm delete" in status.inner_text(),
             60, "the request to confirm the delete")
    assert os.path.isdir(path)                  # one press deletes nothing
    picker.get_by_role("button", name="Confirm delete", exact=True).click()
    wait_for(page, lambda s: s["kernel"] == "idle" and "deleted" in status.inner_text(), 60,
             "the delete")
    assert not os.path.exists(path)
    assert not any(label.startswith(oldest)
                   for label in rows.locator("option").all_inner_texts())
    picker.screenshot(path=os.path.join(screenshots, "after-delete.png"))
