"""Actions run right after a module's first import (worker/common/import_hooks.py). Pure."""

import sys

import pytest
from tfmw_notebook.worker.common.import_hooks import when_imported

pytestmark = pytest.mark.unit


def test_every_action_on_one_module_runs_in_order_after_its_first_import(tmp_path, monkeypatch):
    # On the default workers both the Keras 3 corrections and the Keras hooks wait for
    # `import keras`: the second action once replaced the first.
    (tmp_path / "tfmw_hooked_module.py").write_text("VALUE = 41\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []
    when_imported("tfmw_hooked_module", lambda module: seen.append(("first", module.VALUE)))
    when_imported("tfmw_hooked_module", lambda module: seen.append(("second", module.VALUE)))
    assert seen == []
    try:
        import tfmw_hooked_module  # noqa: F401
        assert seen == [("first", 41), ("second", 41)]
        when_imported("tfmw_hooked_module", lambda module: seen.append(("now", module.VALUE)))
        assert seen[-1] == ("now", 41)   # already imported: at once
    finally:
        sys.modules.pop("tfmw_hooked_module", None)
