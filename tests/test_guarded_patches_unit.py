"""Corrections that degrade, never break (worker/common/guarded_patches.py), pure: a correction
whose target is missing or changed is skipped and reported in one line, and the import that
triggered it goes on. The Keras 3 corrections are run against a stand-in `keras` package
written to a temp directory, whose trainer class is renamed (as keras-nightly 3.16 did), and
a stand-in `tensorflow` (an empty package: the corrections only import it)."""

import sys
import textwrap

import pytest
from tfmw_notebook.protocol.warning import TFDistWarning
from tfmw_notebook.worker.common import guarded_patches as gp
from tfmw_notebook.worker.common import import_hooks, package_versions
from tfmw_notebook.worker.corrections import keras3_corrections as kc

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def no_skips_yet(monkeypatch):
    monkeypatch.setattr(gp, "_skips", [])
    monkeypatch.setattr(gp, "_unreported", [])


class Library:
    def step(self, values, strategy):
        return values


def test_a_correction_whose_target_is_there_is_applied():
    seen = []
    assert gp.patch("demo", "Library.step", lambda: gp.method(Library, "step", "values"),
                    seen.append, risk="r", library="keras") is True
    assert seen == [Library.step]
    assert gp.skipped() == [] and gp.take_report() is None


@pytest.mark.parametrize("lookup, reason", [
    (lambda: gp.attribute(Library, "gone"), "AttributeError: Library has no attribute 'gone'"),
    (lambda: gp.method(Library, "step", "reduction"),
     "TargetChanged: Library.step(self, values, strategy) takes no reduction"),
    (lambda: __import__("tfmw_no_such_module"),
     "ModuleNotFoundError: No module named 'tfmw_no_such_module'"),
])
def test_a_missing_or_changed_target_is_skipped_with_its_reason(lookup, reason):
    applied = []
    assert gp.patch("demo", "Library.step", lookup, applied.append, risk="r",
                    library="keras") is False
    assert applied == []
    assert [skip.reason for skip in gp.skipped()] == [reason]


def test_a_correction_that_raises_is_skipped_not_raised():
    def apply(found):
        raise ValueError("changed\ninternals")
    assert gp.patch("demo", "t", lambda: 1, apply, risk="r", library="keras") is False
    assert gp.skipped()[0].reason == "ValueError: changed internals"   # one line


def test_a_method_taking_any_keyword_accepts_every_name():
    class Open:
        def add_weight(self, *args, **kwargs):
            pass
    assert gp.method(Open, "add_weight", "name", "aggregation") is Open.add_weight


def test_the_report_is_one_line_once_naming_correction_versions_and_risk(monkeypatch):
    versions = {"keras": "3.16.0.dev2026102704", "tensorflow": "2.23.0-dev20261026"}
    monkeypatch.setattr(package_versions, "version", versions.get)
    gp.patch("keras3_corrections.build_from_local_batch", "trainer.TensorFlowTrainer.x",
             lambda: gp.attribute(Library, "TensorFlowTrainer"), print, library="keras",
             risk="Keras 3 fit may fail")
    line = gp.take_report()
    assert "\n" not in line
    assert line.startswith("tfmw_notebook: on Keras 3.16.0.dev2026102704, TensorFlow "
                           "2.23.0-dev20261026 skipped 1 correction for multi-worker training: "
                           "keras3_corrections.build_from_local_batch (trainer.TensorFlowTrainer"
                           ".x: AttributeError: Library has no attribute 'TensorFlowTrainer'), "
                           "so Keras 3 fit may fail."), line
    assert gp.take_report() is None          # said once
    assert len(gp.skipped()) == 1            # still known


def test_other_workers_report_only_what_the_chief_does_not_correct():
    gp.patch("everywhere", "t", lambda: gp.attribute(Library, "a"), print, risk="r",
             library="keras")
    gp.patch("chief_writes", "t", lambda: gp.attribute(Library, "b"), print, risk="r",
             library="tensorflow", on_chief=False)
    line = gp.take_report(is_chief=False)
    assert "chief_writes" in line and "everywhere" not in line and "1 correction" in line
    assert gp.take_report(is_chief=False) is None


def test_emit_report_writes_the_line_to_the_cells_stream(capsys):
    gp.patch("demo", "t", lambda: gp.attribute(Library, "gone"), print, risk="r",
             library="keras")
    line = gp.emit_report(is_chief=True)
    assert capsys.readouterr().err == line + "\n"
    assert gp.emit_report(is_chief=True) is None and capsys.readouterr().err == ""


def test_an_import_hook_that_raises_leaves_the_import_working(tmp_path, monkeypatch):
    (tmp_path / "tfmw_hooked_broken.py").write_text("VALUE = 7\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    def correct(module):
        module.Missing.method = None      # AttributeError: the target is not there
    import_hooks.when_imported("tfmw_hooked_broken", correct)
    try:
        import tfmw_hooked_broken
        assert tfmw_hooked_broken.VALUE == 7
    finally:
        sys.modules.pop("tfmw_hooked_broken", None)
    [skip] = gp.skipped()
    assert skip.target == "tfmw_hooked_broken" and "Missing" in skip.reason
    assert "test_guarded_patches_unit.test_an_import_hook_that_raises" in skip.correction


# --- package versions by module, or by any distribution that provides it ------------------


def test_a_version_is_the_modules_own_first(monkeypatch):
    monkeypatch.setitem(sys.modules, "tf_keras", type(sys)("tf_keras"))
    sys.modules["tf_keras"].__version__ = "2.23.0.dev2026102618"
    assert package_versions.describe("tf_keras") == "tf-keras 2.23.0.dev2026102618"


def test_a_version_comes_from_whichever_distribution_is_installed(monkeypatch):
    installed = {"tf-keras-nightly": "2.23.0.dev2026102618", "tf-nightly": "2.23.0.dev20261026"}

    def version(name):
        if name not in installed:
            raise package_versions.importlib.metadata.PackageNotFoundError(name)
        return installed[name]
    monkeypatch.setattr(package_versions.importlib.metadata, "version", version)
    for module in ("tf_keras", "tensorflow", "keras"):     # not imported: the distributions'
        monkeypatch.delitem(sys.modules, module, raising=False)
    assert package_versions.installed_version("tf_keras") == "2.23.0.dev2026102618"
    assert package_versions.version("tensorflow") == "2.23.0.dev20261026"
    assert package_versions.version("keras") is None
    assert package_versions.describe("keras") == "Keras not installed"


# --- the Keras 3 corrections on a Keras whose trainer class is renamed ---------------------

STAND_IN = {
    "keras/__init__.py": """
        __version__ = "3.99.0"
        from keras.src import backend
    """,
    "keras/src/__init__.py": "",
    "keras/src/tree.py": "def map_structure(f, *s): return f(*s)\n",
    "keras/src/backend/__init__.py": """
        def backend(): return "tensorflow"
        class Variable: pass
    """,
    "keras/src/backend/tensorflow/__init__.py": "",
    # TensorFlowTrainer renamed; reduce_per_replica as Keras has it.
    "keras/src/backend/tensorflow/trainer.py": """
        class RenamedTrainer:
            def _maybe_symbolic_build(self, iterator=None, data_batch=None): pass
        def reduce_per_replica(values, strategy, reduction): return values
        def _collective_all_reduce_multi_worker(strategy): return False
    """,
    "tensorflow/__init__.py": "",
}


def _stand_in_names():
    return [name for name in sys.modules if name.split(".")[0] in ("keras", "tensorflow")]


@pytest.fixture
def stand_in_keras(tmp_path, monkeypatch):
    """`import keras` and `import tensorflow` find the stand-ins; the real modules (if this
    process had imported them) come back after."""
    for path, text in STAND_IN.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in _stand_in_names():
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(kc, "_applied", None)
    yield
    for name in _stand_in_names():
        del sys.modules[name]
    import_hooks._after_import.actions.pop("keras", None)


def test_import_keras_works_and_one_line_names_the_skipped_corrections(stand_in_keras):
    # As a tf-keras worker does (keras_flavour.prepare): the corrections at `import keras`.
    import_hooks.when_imported("keras", lambda module: kc.apply())
    with pytest.warns(TFDistWarning, match="Keras 3.99.0 is not among the versions"):
        import keras
    assert keras.__version__ == "3.99.0"
    from keras.src.backend.tensorflow import trainer
    assert kc.corrections_on(trainer.reduce_per_replica) == [
        "read_variables_in_logs", "mean_logs_across_workers"]     # their target is there
    assert kc.apply() == ["mean_logs_across_workers", "read_variables_in_logs"]
    line = gp.take_report()
    assert "\n" not in line and line.startswith("tfmw_notebook: on Keras 3.99.0, TensorFlow")
    assert ("keras3_corrections.build_from_local_batch (keras.src.backend.tensorflow.trainer."
            "TensorFlowTrainer (Trainer from Keras 3.16)._maybe_symbolic_build: TargetChanged: "
            "keras.src.backend.tensorflow.trainer has no TensorFlowTrainer nor Trainer), so "
            "Keras 3 fit and evaluate may fail on the workers") in line
    assert "skipped 5 corrections" in line and "defer_build_without_call" in line
    assert gp.take_report() is None


def test_the_trainer_class_is_found_under_its_3_16_name(stand_in_keras):
    from keras.src.backend.tensorflow import trainer
    trainer.Trainer = trainer.RenamedTrainer
    assert kc.trainer_class() is trainer.RenamedTrainer
    trainer.TensorFlowTrainer = type("TensorFlowTrainer", (trainer.RenamedTrainer,), {})
    assert kc.trainer_class() is trainer.TensorFlowTrainer     # the older name first
    assert kc.build_from_local_batch() is True
    assert kc.corrections_on(trainer.TensorFlowTrainer._maybe_symbolic_build) == [
        "build_from_local_batch"]
