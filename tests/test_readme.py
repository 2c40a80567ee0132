"""The README's first example, pasted into a real kernel one block per cell, trains.

The final dashboard image the fit cell shows is saved to test-output/readme/dashboard.png;
docs/_static/dashboard.png (the README's screenshot) is that file from a run of this test.
"""

from __future__ import annotations

import base64
import os
import re

import pytest

from kernel_session import KernelSession

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
SCREENSHOT = os.path.join(ROOT, "test-output", "readme", "dashboard.png")

pytestmark = pytest.mark.timeout(240)


def readme_cells() -> list[str]:
    """The README's ```python blocks, in order: the notebook cells of its first example."""
    with open(README) as f:
        return re.findall(r"^```python\n(.*?)^```$", f.read(), flags=re.S | re.M)


def test_the_readme_example_trains_when_pasted(tmp_path):
    cells = readme_cells()
    assert cells[0].strip() == "%load_ext tfmw_notebook" and cells[-1].strip() == "%tfdist stop"
    session = KernelSession(cwd=str(tmp_path))
    try:
        outputs = [session.ok(cell, timeout=180) for cell in cells]
        fit = next(out for cell, out in zip(cells, outputs) if "model.fit(" in cell)
        # The widget is replaced by its final PNG when the cell ends.
        images = [bundle["image/png"] for bundle in fit.updates if "image/png" in bundle]
        assert images, f"the fit cell showed no dashboard image: {fit.results}"
        assert re.search(r"^5 epochs · .* · loss \d", fit.stdout), fit.stdout
        os.makedirs(os.path.dirname(SCREENSHOT), exist_ok=True)
        with open(SCREENSHOT, "wb") as f:
            f.write(base64.b64decode(images[-1]))
        # The history cell's value: five epochs of validation accuracy, learnt well above chance.
        accuracy = session.ok('run.merged_history()["val_accuracy"]').results[-1]["text/plain"]
        values = [float(v) for v in re.findall(r"\d\.\d+", accuracy)]
        assert len(values) == 5 and values[-1] > 0.8, accuracy
        assert "no cluster is running" in session.execute("%tfdist status").stderr
    finally:
        session.shutdown()
