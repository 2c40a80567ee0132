"""Run a corpus program (tests/corpus/programs/) on 2 workers through the magics, and in
one process for reference.

The format of a program module is in tests/corpus/README.md. On the workers a program
runs as a user would run it: `%%tfdist` + DATA, then `%%tfdist` + each cell, in a real
kernel with a started cluster (`CorpusCluster`, one per Keras mode, shared by several
programs). Programs must not see each other's names, and a restart per program is too
slow, so the names each program defines are deleted afterwards on every worker and in
the notebook (the names present after the start stay), and each program gets a fresh
working directory and temp directory of its own.

The reference runs DATA + CELLS, with the program's ONE_PROCESS replacements, in a
subprocess (one_process.py) with no TF_CONFIG and the workers' TF_USE_LEGACY_KERAS.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import pkgutil
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)

from corpus.reference_zygote import ForkedRun, Zygote  # noqa: E402
from kernel_session import KernelSession, kernel_with_cluster  # noqa: E402

PREFIXES = ("tf_", "kio_", "ext_")
MODES = {"default": "", "2": "--keras 2", "3": "--keras 3"}
CELL_TIMEOUT = 300.0        # one cell on 2 loaded cores
REFERENCE_TIMEOUT = 420.0   # the whole one-process run
REQUIRED = ("SOURCE", "KERAS", "CHANGES", "DATA", "CELLS", "MODEL", "LOSS", "TOLERANCE",
            "ONE_PROCESS", "EXPECT_ERROR")


# -- programs ---------------------------------------------------------------------------


def program_names() -> list[str]:
    """Every program module's name, sorted."""
    from corpus import programs

    return sorted(info.name for info in pkgutil.iter_modules(programs.__path__)
                  if info.name.startswith(PREFIXES))


def load_program(name: str) -> ModuleType:
    module = importlib.import_module(f"corpus.programs.{name}")
    missing = [attr for attr in REQUIRED if not hasattr(module, attr)]
    if missing:
        raise AttributeError(f"corpus program {name} lacks {', '.join(missing)}: "
                             "see tests/corpus/README.md for the format")
    if module.KERAS not in MODES:
        raise ValueError(f"corpus program {name}: KERAS={module.KERAS!r}; "
                         f"expected one of {sorted(MODES)}")
    return module


def reference_replicas(program: ModuleType) -> int:
    """How many replicas the one-process reference runs with (REFERENCE_REPLICAS, optional:
    1, no strategy, unless the program says why its loss depends on the replicas)."""
    return int(getattr(program, "REFERENCE_REPLICAS", 1))


def one_process_source(program: ModuleType) -> list[str]:
    """DATA then CELLS with every ONE_PROCESS replacement applied; each replacement must
    match somewhere, or the reference would silently train something else."""
    sources = [program.DATA, *program.CELLS]
    for old, new in program.ONE_PROCESS.items():
        if not any(old in source for source in sources):
            raise ValueError(f"corpus program {program.__name__}: ONE_PROCESS text {old!r} "
                             "is in neither DATA nor CELLS")
        sources = [source.replace(old, new) for source in sources]
    return sources


# -- results ----------------------------------------------------------------------------


@dataclass
class WorkerRun:
    """What the program did on the workers."""
    error: str = ""                       # the first failed cell's error text ("" if none)
    error_line: str = ""                  # its first line, for tables
    output: str = ""                      # every cell's stdout + stderr + error text
    digests: list[str] = field(default_factory=list)    # per rank: sha256 of MODEL's weights
    weight_counts: list[int] = field(default_factory=list)  # per rank: numbers hashed
    loss: float | None = None             # LOSS on the chief


@dataclass
class ReferenceRun:
    """What the program did in one process."""
    error: str = ""
    error_line: str = ""
    loss: float | None = None
    output: str = ""


# -- workers ----------------------------------------------------------------------------

# Worker-side helpers; their names start with _corpus so that cleaning keeps them.
_WORKER_HELPERS = r'''
import hashlib as _corpus_hashlib, importlib as _corpus_importlib, os as _corpus_os
import sys as _corpus_sys, tempfile as _corpus_tempfile
import numpy as _corpus_np

def _corpus_weights(obj):
    if isinstance(obj, (list, tuple)):
        return [w for item in obj for w in _corpus_weights(item)]
    if hasattr(obj, "get_weights"):
        return [_corpus_np.asarray(w) for w in obj.get_weights()]
    return [_corpus_np.asarray(v.numpy()) for v in obj.variables]

def _corpus_digest(obj):
    digest, count = _corpus_hashlib.sha256(), 0
    for weight in _corpus_weights(obj):
        digest.update(weight.tobytes())
        count += weight.size
    return digest.hexdigest(), count

def _corpus_clean():
    for name in [n for n in globals() if n not in _corpus_keep and not n.startswith("_corpus")
                 and not _corpus_in_flight(n)]:
        del globals()[name]

def _corpus_in_flight(name):
    # ipyparallel 8 keeps the call under way in the namespace (_<msg id>_f, _args, _kwargs,
    # _result) and pops it afterwards: deleting it raised KeyError in the engine.
    head, _, tail = name.rpartition("_")
    return (tail in ("f", "args", "kwargs", "result") and head.startswith("_")
            and len(head) > 30 and set(head) <= set("_0123456789abcdef"))

def _corpus_forget_modules():
    # Modules the last program imported from its own directory (a %%writefile'd
    # mnist_setup.py): the next program's file of the same name must be imported afresh.
    here = _corpus_os.getcwd() + _corpus_os.sep
    for name, module in list(_corpus_sys.modules.items()):
        if (getattr(module, "__file__", None) or "").startswith(here):
            del _corpus_sys.modules[name]
    _corpus_importlib.invalidate_caches()

def _corpus_enter(directory, name):
    _corpus_clean()
    _corpus_forget_modules()
    _corpus_os.chdir(directory)
    private = _corpus_os.path.join(_corpus_base_tempdir, name)
    _corpus_os.makedirs(private, exist_ok=True)
    _corpus_tempfile.tempdir = private
    _corpus_os.environ["TMPDIR"] = private

_corpus_base_tempdir = _corpus_tempfile.gettempdir()
_corpus_keep = set(globals())
'''

_NOTEBOOK_HELPERS = r'''
def _corpus_clean():
    for name in [n for n in globals() if n not in _corpus_keep and not n.startswith("_corpus")]:
        del globals()[name]
_corpus_keep = set(globals())
'''


class CorpusCluster:
    """A kernel with a started 2-worker cluster in one Keras mode, for several programs."""

    def __init__(self, mode: str, directory: str, workers: int = 2,
                 silence: float | None = None):
        self.mode = mode
        self.directory = directory
        self._zygote: Zygote | None = None
        os.makedirs(directory, exist_ok=True)
        self._context = kernel_with_cluster(directory, workers=workers, flags=MODES[mode])
        self.kernel: KernelSession = self._context.__enter__()
        try:
            self._install_helpers()
            self.legacy_keras = self._workers_legacy_keras()
            if silence is not None:   # a loaded machine: see compare_modes.py --silence
                self.kernel.ok("from tfmw_notebook.magics.session import active_cluster\n"
                               f"active_cluster().silence = {float(silence)!r}\n"
                               "del active_cluster")
        except BaseException:
            self.close()
            raise

    def _install_helpers(self) -> None:
        self.kernel.ok("%%tfdist --no-scope\n" + _WORKER_HELPERS, timeout=CELL_TIMEOUT)
        self.kernel.ok(_NOTEBOOK_HELPERS)

    def _workers_legacy_keras(self) -> str | None:
        """The TF_USE_LEGACY_KERAS the workers run with (None: unset)."""
        self.kernel.ok("%%tfdist --no-scope\n"
                       "_corpus_legacy = _corpus_os.environ.get('TF_USE_LEGACY_KERAS')")
        values = self.pull("_corpus_legacy")
        return values[0]

    def pull(self, name: str) -> list[Any]:
        """`name` from each rank (JSON-able values only)."""
        out = self.kernel.ok(
            "import json as _corpus_json\n"
            "from tfmw_notebook.magics.session import active_cluster as _corpus_active\n"
            f"print(_corpus_json.dumps([_corpus_active().pull([{name!r}], rank=r)[{name!r}] "
            "for r in range(_corpus_active().size)]))")
        return json.loads(out.stdout.strip().splitlines()[-1])

    def enter(self, name: str) -> str:
        """Fresh names, working directory and temp directory for program `name`; a
        restart first if the workers do not answer (a failed program's recovery failed)."""
        directory = os.path.join(self.directory, name)
        os.makedirs(os.path.join(directory, "workers"), exist_ok=True)
        workers = os.path.join(directory, "workers")
        cell = f"%%tfdist --no-scope\n_corpus_enter({workers!r}, {name!r})"
        if self.kernel.execute(cell, timeout=CELL_TIMEOUT).status != "ok":
            self.kernel.ok("%tfdist restart", timeout=CELL_TIMEOUT)
            self._install_helpers()
            self.kernel.ok(cell, timeout=CELL_TIMEOUT)
        self.kernel.ok(f"_corpus_clean()\nimport os as _corpus_os\n_corpus_os.chdir({workers!r})")
        return directory

    def zygote(self) -> Zygote:
        """Where this mode's one-process runs are forked from (started at the first)."""
        if self._zygote is None:
            self._zygote = Zygote(reference_environment(self.legacy_keras),
                                  log=os.path.join(self.directory, "reference-zygote.log"))
        return self._zygote

    def close(self) -> None:
        try:
            if self._zygote is not None:
                self._zygote.close()
        finally:
            self._context.__exit__(None, None, None)


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else ""


def run_on_workers(cluster: CorpusCluster, program: ModuleType) -> WorkerRun:
    """Run DATA then each cell in `%%tfdist` cells; on success collect the digests of
    MODEL's weights on every rank and LOSS on the chief."""
    kernel, run = cluster.kernel, WorkerRun()
    cluster.enter(program.__name__.rsplit(".", 1)[-1])
    for number, source in enumerate([program.DATA, *program.CELLS]):
        try:
            out = kernel.execute("%%tfdist\n" + source, timeout=CELL_TIMEOUT)
        except TimeoutError as exc:   # a hung cell: interrupt it, the next program goes on
            kernel.interrupt()
            run.output += str(exc)
            run.error = run.error_line = (f"TimeoutError: cell {number} (0 is DATA) did not "
                                          f"finish within {CELL_TIMEOUT:.0f} s")
            return run
        run.output += out.stdout + out.stderr + out.error_text
        if out.status != "ok":
            run.error = out.error_text or out.stderr
            run.error_line = (f"{out.error['ename']}: {_first_line(out.error['evalue'])}"
                              if out.error else _first_line(out.stderr))
            return run
    out = kernel.execute("%%tfdist --no-scope\n"
                         f"_corpus_result = _corpus_digest({program.MODEL})\n"
                         f"_corpus_loss = float({program.LOSS})", timeout=CELL_TIMEOUT)
    if out.status != "ok":   # the program's MODEL or LOSS expression is wrong
        run.error = out.error_text or out.stderr
        run.error_line = ("MODEL/LOSS: " + (f"{out.error['ename']}: {out.error['evalue']}"
                                            if out.error else _first_line(out.stderr)))
        return run
    results = cluster.pull("_corpus_result")
    run.digests = [digest for digest, _ in results]
    run.weight_counts = [count for _, count in results]
    run.loss = cluster.pull("_corpus_loss")[0]
    return run


# -- one process ------------------------------------------------------------------------


class OneProcessRun:
    """The program in one fresh process (one_process.py) in `directory`, run alongside the
    workers: it waits on the workers' cells' dispatch and collectives fill (measured: the
    reference, run after the workers, was 16-20 s of a 36-60 s program)."""

    def __init__(self, program: ModuleType, directory: str, legacy_keras: str | None,
                 zygote: Zygote | None = None):
        os.makedirs(os.path.join(directory, "tmp"), exist_ok=True)
        temp = {"TMPDIR": os.path.join(directory, "tmp")}
        spec = os.path.join(directory, "spec.json")
        with open(spec, "w") as f:
            json.dump({"sources": one_process_source(program), "loss": program.LOSS,
                       "replicas": reference_replicas(program)}, f)
        # Files, not pipes: a program that prints much must not wait for a reader.
        self._output = [os.path.join(directory, name) for name in ("stdout", "stderr")]
        if zygote is not None:
            self.process: subprocess.Popen | ForkedRun = zygote.run(
                spec, directory, *self._output, temp)
            return
        with open(self._output[0], "w") as stdout, open(self._output[1], "w") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "corpus.one_process", spec], stdin=subprocess.DEVNULL,
                stdout=stdout, stderr=stderr, cwd=directory,
                env={**reference_environment(legacy_keras), **temp})

    def result(self, timeout: float = REFERENCE_TIMEOUT) -> ReferenceRun:
        """Its result, waiting at most `timeout` seconds more for it."""
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            self.process.wait(timeout=30)
            output = self._read(0) + self._read(1)
            return ReferenceRun(error=f"TimeoutExpired: no result within {timeout:.0f} s",
                                error_line=f"TimeoutExpired: no result within {timeout:.0f} s",
                                output=output)
        return _reference_result(subprocess.CompletedProcess(
            self.process.args, self.process.returncode, self._read(0), self._read(1)))

    def _read(self, which: int) -> str:
        with open(self._output[which], errors="replace") as f:
            return f.read()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()


def reference_environment(legacy_keras: str | None) -> dict[str, str]:
    """The environment of a one-process run: no TF_CONFIG, the workers' Keras."""
    env = {key: value for key, value in os.environ.items() if key != "TF_CONFIG"}
    env.pop("TF_USE_LEGACY_KERAS", None)
    if legacy_keras is not None:
        env["TF_USE_LEGACY_KERAS"] = legacy_keras
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [TESTS, env.get("PYTHONPATH")]))
    return env


def absolute_paths(program: ModuleType) -> set[str]:
    """The paths the program names absolutely (`'/tmp/ckpt'`): its workers and its
    one-process run would share those files, so they must not run at once."""
    return {path for source in [program.DATA, *program.CELLS]
            for path in re.findall(r"""['"](/[\w./-]*)['"]""", source)}   # not '/cpu:0'


def remove_temporary(paths: set[str]) -> None:
    """Remove those of `paths` under the temp directory (what an earlier run of the program
    left there, e.g. a BackupAndRestore backup it would resume from); nothing else."""
    temp = os.path.realpath(tempfile.gettempdir())
    for path in paths:
        real = os.path.realpath(path)
        if os.path.dirname(real) != temp and not real.startswith(temp + os.sep):
            continue
        if real == temp:
            continue
        if os.path.isdir(real):
            shutil.rmtree(real, ignore_errors=True)
        elif os.path.exists(real):
            os.remove(real)


def run_one_process(program: ModuleType, directory: str, legacy_keras: str | None,
                    timeout: float = REFERENCE_TIMEOUT) -> ReferenceRun:
    """Run the program in one fresh process (one_process.py) in `directory`."""
    return OneProcessRun(program, directory, legacy_keras).result(timeout)


def _reference_result(proc: subprocess.CompletedProcess) -> ReferenceRun:
    run = ReferenceRun(output=proc.stdout + proc.stderr)
    marked = [line for line in proc.stdout.splitlines() if line.startswith("CORPUS_RESULT ")]
    if not marked:
        run.error = f"the one-process run ended with code {proc.returncode} and no result"
        run.error_line = run.error
        return run
    result = json.loads(marked[-1][len("CORPUS_RESULT "):])
    run.error = result.get("error", "")
    run.error_line = _first_line(run.error)
    run.loss = result.get("loss")
    return run


# -- verdict ----------------------------------------------------------------------------


def problems(program: ModuleType, workers: WorkerRun, reference: ReferenceRun | None) -> list[str]:
    """What is wrong with a program's runs against its format's promises; [] when it
    passes. Without a reference, or with TOLERANCE None (a program whose loss says more
    about its random start than its training), the loss is only checked to be finite."""
    expected = program.EXPECT_ERROR
    if expected:
        found = []
        if expected["error"] not in workers.error:
            found.append(f"workers: expected an error with {expected['error']!r}, got "
                         f"{workers.error_line or 'none'}")
        if expected["hint"] not in workers.output:
            found.append(f"workers: the error output lacks the hint {expected['hint']!r}")
        if reference is not None and expected["error"] not in reference.error:
            found.append(f"one process: expected an error with {expected['error']!r}, got "
                         f"{reference.error_line or 'none'}")
        return found
    if reference is not None and reference.error:
        return [f"one process failed: {reference.error_line}"]
    if workers.error:
        return [f"workers failed: {workers.error_line}"]
    return _training_problems(program, workers, reference)


def _training_problems(program: ModuleType, workers: WorkerRun,
                       reference: ReferenceRun | None) -> list[str]:
    found = []
    if len(set(workers.digests)) != 1 or not workers.weight_counts[0]:
        found.append(f"weights differ across workers (or none): digests "
                     f"{[d[:12] for d in workers.digests]}, sizes {workers.weight_counts}")
    loss = workers.loss
    if loss is None or not math.isfinite(loss):
        found.append(f"the workers' loss is not finite: {loss}")
    elif reference is not None and program.TOLERANCE is not None:
        ref = reference.loss
        if ref is None or not math.isfinite(ref):
            found.append(f"the one-process loss is not finite: {ref}")
        elif abs(loss - ref) > program.TOLERANCE * abs(ref):
            replicas = reference_replicas(program)
            found.append(f"loss {loss:.4g} on 2 workers vs {ref:.4g} in one process: more "
                         f"than {program.TOLERANCE:.0%} apart"
                         + (f" (the reference on {replicas} replicas)" if replicas > 1 else ""))
    return found


def scratch_directory(prefix: str = "tfmw-corpus-") -> str:
    return tempfile.mkdtemp(prefix=prefix)
