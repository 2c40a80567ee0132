"""The corpus: real programs written elsewhere (TensorFlow's docs, keras.io, Ray Train),
each run on 2 workers through the magics and in one process (tests/corpus/).

For each program: (a) no error where one process has none; (b) identical weights on every
worker; (c) a finite final loss within the program's TOLERANCE of the one-process loss.
A program that fails in one process too (EXPECT_ERROR) must show the same error on the
workers, with the hint that says how to fix it. One cluster per Keras mode serves all
the programs of that mode (the programs run grouped by mode). `-m corpus` runs these
alone; `-m "corpus and unit"` checks only the programs' format.
"""

from __future__ import annotations

import ast
import os
import re
import time

import pytest
from IPython.core.inputtransformer2 import TransformerManager

from corpus import harness

PROGRAMS = sorted(harness.program_names(),
                  key=lambda name: (harness.load_program(name).KERAS, name))

pytestmark = pytest.mark.corpus


class _OneClusterAtATime:
    """The cluster of the mode asked for; the previous mode's is stopped first (two
    clusters at once would crowd 2 cores)."""

    def __init__(self, directory: str):
        self.directory = directory
        self.current: harness.CorpusCluster | None = None

    def get(self, mode: str) -> harness.CorpusCluster:
        if self.current is not None and self.current.mode != mode:
            self.close()
        if self.current is None:
            self.current = harness.CorpusCluster(mode, f"{self.directory}/keras-{mode}")
        return self.current

    def close(self) -> None:
        if self.current is not None:
            current, self.current = self.current, None
            current.close()


@pytest.fixture(scope="module")
def clusters(tmp_path_factory):
    holder = _OneClusterAtATime(str(tmp_path_factory.mktemp("corpus")))
    try:
        yield holder
    finally:
        holder.close()


@pytest.mark.timeout(1200)
@pytest.mark.parametrize("name", PROGRAMS)
def test_program(clusters, name):
    program = harness.load_program(name)
    cluster = clusters.get(program.KERAS)
    def reference_run():
        return harness.OneProcessRun(program, f"{cluster.directory}/{name}/one-process",
                                     cluster.legacy_keras, cluster.zygote())

    # Alongside the workers, unless the two would share files by absolute path; then
    # each starts without the files the other (or an earlier run) left there.
    shared = harness.absolute_paths(program)
    harness.remove_temporary(shared)
    one_process = None if shared else reference_run()
    try:
        workers = harness.run_on_workers(cluster, program)
    except BaseException:
        if one_process is not None:
            one_process.kill()
        raise
    if one_process is None:
        harness.remove_temporary(shared)
        one_process = reference_run()
    reference = one_process.result()
    found = harness.problems(program, workers, reference)
    print(f"CORPUS {name}: loss {workers.loss!r} on 2 workers, {reference.loss!r} in one process")
    assert not found, (
        f"{name}: " + "; ".join(found)
        + f"\n--- workers' output (last 4000 chars) ---\n{workers.output[-4000:]}"
        + f"\n--- one process's output (last 4000 chars) ---\n{reference.output[-4000:]}")


@pytest.mark.timeout(600)
def test_programs_do_not_see_each_others_names(clusters):
    """What one program defined (names on the workers and in the notebook, a module
    written to its directory) is gone when the next one starts."""
    cluster = clusters.current or clusters.get("default")
    kernel = cluster.kernel
    cluster.enter("probe_one")
    kernel.ok("%%tfdist\n%%writefile probe_module.py\nVALUE = 1")
    kernel.ok("%%tfdist\nimport sys\nsys.path.insert(0, '.')\nimport probe_module\n"
              "leaked = probe_module.VALUE")
    kernel.ok("leaked_here = 1")
    cluster.enter("probe_two")
    kernel.ok("%%tfdist\n%%writefile probe_module.py\nVALUE = 2")
    kernel.ok("%%tfdist --no-scope\n_corpus_seen = ['leaked' in globals(), "
              "__import__('probe_module').VALUE]")
    assert cluster.pull("_corpus_seen") == [[False, 2], [False, 2]]
    assert "leaked_here" not in kernel.ok("print(sorted(globals()))").stdout


class _Napping:
    DATA, LOSS, ONE_PROCESS = "import os, time", "float(len(os.listdir('.')))", {}
    CELLS = ["open('mine', 'w').close()\ntime.sleep(600)"]


class _Quick(_Napping):
    CELLS = ["open('mine', 'w').close()"]


@pytest.mark.timeout(300)
def test_a_killed_forked_reference_leaves_the_zygote_ready_for_the_next(tmp_path):
    """The zygote's runs, as test_program uses them: one killed mid-run (as when the
    workers' run failed), then the next program's, whose result and files are its own."""
    zygote = harness.Zygote(harness.reference_environment(None), log=str(tmp_path / "log"))
    try:
        napping = harness.OneProcessRun(_Napping, str(tmp_path / "napping"), None, zygote)
        mid_run = tmp_path / "napping" / "mine"   # written by the fork, before its nap
        deadline = time.monotonic() + 120
        while not mid_run.exists():
            assert napping.process.poll() is None, napping.process.returncode
            assert time.monotonic() < deadline, "the forked run never reached its nap"
            time.sleep(0.1)
        napping.kill()
        assert napping.process.returncode == -9
        quick = harness.OneProcessRun(_Quick, str(tmp_path / "quick"), None, zygote).result(120)
    finally:
        zygote.close()
    # Its directory held spec.json, stdout, stderr and tmp when it listed it, then `mine`.
    assert (quick.error, quick.loss) == ("", 5.0), quick.output
    assert zygote.process.returncode == 0


# -- the programs' format (no engines) --------------------------------------------------


@pytest.mark.unit
def test_there_are_programs():
    assert len([name for name in PROGRAMS if name.startswith("tf_")]) >= 7


@pytest.mark.unit
def test_the_compatibility_page_lists_every_program():
    page = open(os.path.join(os.path.dirname(__file__), "..", "docs", "compatibility.md")).read()
    missing = [name for name in PROGRAMS if f"`{name}`" not in page]
    assert not missing, f"docs/compatibility.md lacks {missing}"


@pytest.mark.unit
@pytest.mark.parametrize("name", PROGRAMS)
def test_program_format(name):
    program = harness.load_program(name)
    assert program.__doc__ and program.__doc__.strip(), f"{name}: no docstring"
    assert set(program.SOURCE) >= {"repository", "commit", "path", "title"}
    assert re.fullmatch(r"[0-9a-f]{40}", program.SOURCE["commit"]), program.SOURCE["commit"]
    assert re.fullmatch(r"[\w.-]+/[\w.-]+", program.SOURCE["repository"])
    assert program.CHANGES and all(isinstance(c, str) and c for c in program.CHANGES)
    assert program.CELLS and all(isinstance(c, str) for c in program.CELLS)
    assert program.TOLERANCE is None or (isinstance(program.TOLERANCE, float)
                                         and 0 < program.TOLERANCE < 1)
    if program.EXPECT_ERROR is not None:
        assert set(program.EXPECT_ERROR) == {"error", "hint"}
    for source in [program.DATA, *program.CELLS]:
        ast.parse(TransformerManager().transform_cell(source))   # valid IPython
    for source in harness.one_process_source(program):           # every replacement applies
        ast.parse(TransformerManager().transform_cell(source))
    compile(program.MODEL, "MODEL", "eval")
    compile(program.LOSS, "LOSS", "eval")


@pytest.mark.unit
def test_the_programs_that_name_absolute_paths_are_the_ones_that_do():
    found = {name: harness.absolute_paths(harness.load_program(name)) for name in PROGRAMS}
    assert {name: paths for name, paths in found.items() if paths} == {
        "tf_multi_worker_with_keras": {"/tmp/keras-model", "/tmp/ckpt", "/tmp/backup"},
        "tf_save_and_load": {"/tmp/keras_save.keras", "/tmp/tf_save"}}


@pytest.mark.unit
def test_only_paths_in_the_temp_directory_are_removed(tmp_path, monkeypatch):
    monkeypatch.setattr(harness.tempfile, "gettempdir", lambda: str(tmp_path / "temp"))
    (tmp_path / "temp" / "ckpt").mkdir(parents=True)
    (tmp_path / "temp" / "model.keras").write_text("x")
    (tmp_path / "elsewhere").write_text("kept")
    temp = tmp_path / "temp"
    harness.remove_temporary({str(temp / "ckpt"), str(temp / "model.keras"),
                              str(tmp_path / "elsewhere"), str(temp), "/"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["elsewhere", "temp"]
    assert list((tmp_path / "temp").iterdir()) == []


# -- the verdict (pure) -----------------------------------------------------------------


class _Program:
    TOLERANCE = 0.25
    EXPECT_ERROR = None


def _workers(**fields):
    values = {"digests": ["a" * 64, "a" * 64], "weight_counts": [10, 10], "loss": 1.0}
    values.update(fields)
    return harness.WorkerRun(**values)


@pytest.mark.unit
def test_verdict_passes_identical_weights_and_close_loss():
    assert harness.problems(_Program, _workers(), harness.ReferenceRun(loss=1.2)) == []


@pytest.mark.unit
@pytest.mark.parametrize("workers, reference, expected", [
    (_workers(digests=["a" * 64, "b" * 64]), harness.ReferenceRun(loss=1.0), "weights differ"),
    (_workers(weight_counts=[0, 0]), harness.ReferenceRun(loss=1.0), "weights differ"),
    (_workers(loss=float("nan")), harness.ReferenceRun(loss=1.0), "not finite"),
    (_workers(loss=1.3), harness.ReferenceRun(loss=1.0), "more than 25% apart"),
    (_workers(), harness.ReferenceRun(error="ValueError: x", error_line="ValueError: x"),
     "one process failed: ValueError: x"),
    (harness.WorkerRun(error="E", error_line="TypeError: y"), harness.ReferenceRun(loss=1.0),
     "workers failed: TypeError: y"),
])
def test_verdict_names_what_is_wrong(workers, reference, expected):
    found = harness.problems(_Program, workers, reference)
    assert len(found) == 1 and expected in found[0], found


@pytest.mark.unit
def test_verdict_without_tolerance_checks_only_a_finite_loss():
    class Untolerant(_Program):
        TOLERANCE = None

    assert harness.problems(Untolerant, _workers(loss=5.0), harness.ReferenceRun(loss=1.0)) == []
    found = harness.problems(Untolerant, _workers(loss=float("inf")),
                             harness.ReferenceRun(loss=1.0))
    assert len(found) == 1 and "not finite" in found[0]


@pytest.mark.unit
def test_verdict_of_an_expected_error_needs_the_error_both_ways_and_the_hint():
    class Expecting(_Program):
        EXPECT_ERROR = {"error": "reset_states", "hint": "%tfdist start --keras 2"}

    failed = harness.WorkerRun(error="AttributeError: no reset_states",
                               output="... run %tfdist start --keras 2 ...")
    reference = harness.ReferenceRun(error="AttributeError: no reset_states")
    assert harness.problems(Expecting, failed, reference) == []
    no_hint = harness.WorkerRun(error="AttributeError: no reset_states", output="")
    assert "lacks the hint" in harness.problems(Expecting, no_hint, reference)[0]
    assert "expected an error" in harness.problems(Expecting, _workers(), reference)[0]
    assert "one process" in harness.problems(Expecting, failed, harness.ReferenceRun())[0]
