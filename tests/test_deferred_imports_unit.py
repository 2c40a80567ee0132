"""The deferral itself (worker/boot/deferred_imports.py), on small modules written here."""

import inspect
import sys
import threading

import pytest
from tfmw_notebook.worker.boot import deferred_imports

pytestmark = pytest.mark.unit

SLOW_MODULE = """
import time
RUNS = __import__("builtins").__dict__.setdefault("_deferred_runs", [])
RUNS.append(__name__)
time.sleep(0.3)
value = 42
"""


@pytest.fixture
def deferring(tmp_path, monkeypatch):
    """A finder deferring `deferred_probe` and `deferred_broken`, written to tmp_path."""
    (tmp_path / "deferred_probe.py").write_text(SLOW_MODULE)
    (tmp_path / "deferred_broken.py").write_text("raise RuntimeError('broken at run')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(deferred_imports, "DEFERRED",
                        frozenset({"deferred_probe", "deferred_broken"}))
    import builtins
    monkeypatch.setattr(builtins, "_deferred_runs", [], raising=False)
    before = list(sys.meta_path)
    deferred_imports.install()
    try:
        yield builtins._deferred_runs
    finally:
        sys.meta_path[:] = before
        for name in ("deferred_probe", "deferred_broken"):
            sys.modules.pop(name, None)


def test_import_binds_the_module_and_its_first_use_runs_it_once(deferring):
    import deferred_probe

    assert type(deferred_probe).__name__ == "_DeferredModule" and deferring == []
    # What looks through sys.modules reads these without running it.
    assert deferred_probe.__file__.endswith("deferred_probe.py")
    assert "value" not in deferred_probe.__dict__
    # A file no module has: inspect looks through every module's __file__.
    assert inspect.getmodule(compile("x = 1", "/no/such/file.py", "exec")) is None
    assert deferring == []
    assert deferred_probe.value == 42 and deferring == ["deferred_probe"]
    assert type(deferred_probe) is type(sys) and sys.modules["deferred_probe"] is deferred_probe


def test_threads_reading_it_at_once_wait_for_one_run(deferring):
    import deferred_probe

    seen = []
    threads = [threading.Thread(target=lambda: seen.append(deferred_probe.value))
               for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert seen == [42] * 4 and deferring == ["deferred_probe"]


def test_a_module_that_fails_to_run_raises_at_its_first_use_and_leaves_sys_modules(deferring):
    import deferred_broken

    with pytest.raises(RuntimeError, match="broken at run"):
        deferred_broken.anything  # noqa: B018
    assert "deferred_broken" not in sys.modules


def test_install_adds_one_finder_however_often_it_runs(deferring):
    deferred_imports.install()
    deferred_imports.install()
    finders = [f for f in sys.meta_path if type(f).__name__ == "_DeferredFinder"]
    assert len(finders) == 1
