"""`import tfmw_notebook` (the Python API, a script, a batch job) loads neither TensorFlow
nor the notebook views' libraries: the workers import TensorFlow, a view its widgets and
plotting when it is first shown."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.timeout(120)

HEAVY = ("tensorflow", "tf_keras", "keras", "ipywidgets", "matplotlib")


def _imported_after(code: str) -> list[str]:
    """Which of HEAVY a fresh interpreter has imported after running `code`."""
    probe = (f"{code}\nimport json, sys\n"
             f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            timeout=90, cwd=os.path.dirname(os.path.dirname(__file__)))
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_importing_the_package_and_its_python_api_loads_no_view_and_no_tensorflow():
    assert _imported_after("import tfmw_notebook\n"
                           "from tfmw_notebook import TFCluster, Runs, list_runs") == []


def test_a_view_loads_its_libraries_when_it_is_asked_for():
    loaded = _imported_after("from tfmw_notebook.widgets import Dashboard")
    assert "ipywidgets" in loaded
    assert "tensorflow" not in loaded


def test_an_unknown_name_of_the_views_package_is_an_attribute_error():
    import tfmw_notebook.widgets as views

    with pytest.raises(AttributeError, match="no attribute 'Dashbord'"):
        views.Dashbord  # noqa: B018
