"""The real `%%tfdist` magic in an in-process IPython shell, on a warm 2-worker cluster.

Run records are written by the magic layer (the notebook side) from what the chief's
RunRecorder callback publishes, so the experiments benchmarks drive the magic itself,
as a notebook cell does, not `TFCluster.run`. The shell is a terminal one (no kernel:
no widgets); the cells run with `--no-dashboard --no-checkpoint`, so what differs
between the sides of a comparison is what the comparison is about.
"""

from __future__ import annotations

import contextlib
import io
import time

from . import keras_choice
from .common import WORKERS, BenchError, live_clusters

# Run once on every worker: a switch for the chief's run recording, and a clock on the
# RunRecorder's methods. With recording off, fit() gets a callback that does nothing
# instead of the RunRecorder, and no record is kept or published: the cell returns no
# run, and the magic then writes nothing ("a cell with no fit makes no run"). With it
# on, fit() gets the real RunRecorder; each of its calls is timed (two perf_counter
# calls, well under a microsecond) into _bench["callback_seconds"].
RECORDING_SWITCH = """\
import functools as _functools, time as _time
from tfmw_notebook.worker.fits import keras_hooks as _hooks, keras_run_record as _run_record
_bench = {"record": True, "callback_seconds": []}
_bench_real_recorder = _hooks._run_recorder

class _BenchNoRecorder(tf.keras.callbacks.Callback):
    pass

def _bench_recorder(recorder_class, args, kwargs, positions):
    if _bench["record"]:
        return _bench_real_recorder(recorder_class, args, kwargs, positions)
    return _BenchNoRecorder()

def _bench_timed(method):
    @_functools.wraps(method)
    def timed(self, *args, **kwargs):
        began = _time.perf_counter()
        try:
            return method(self, *args, **kwargs)
        finally:
            _bench["callback_seconds"].append((method.__name__, _time.perf_counter() - began))
    return timed

_hooks._run_recorder = _bench_recorder
for _name in ("on_train_begin", "on_epoch_end", "on_train_end"):
    setattr(_run_record.RunRecorder, _name, _bench_timed(getattr(_run_record.RunRecorder, _name)))
"""


class MagicShell:
    """An InteractiveShell with the magics loaded and a cluster `%tfdist start` made."""

    def __init__(self):
        from IPython.core.interactiveshell import InteractiveShell

        self.shell = InteractiveShell.instance()
        self.shell.run_line_magic("load_ext", "tfmw_notebook")
        self.cluster = None
        self.value = None   # the last cell's value (a sweep's SweepResult)
        self.printed = ""

    def start(self) -> float:
        """`%tfdist start` (CPU only, as the floor); returns its seconds."""
        began = time.perf_counter()
        self.line(f"start -n {WORKERS} --gpus-per-worker 0 --keras {keras_choice.current}")
        seconds = time.perf_counter() - began
        from tfmw_notebook.magics.session import active_cluster

        self.cluster = active_cluster()
        if self.cluster is None:
            raise BenchError("%tfdist start made no cluster")
        live_clusters.append(self.cluster)
        return seconds

    def line(self, text: str):
        with contextlib.redirect_stdout(io.StringIO()):
            return self.shell.run_line_magic("tfdist", text)

    def cell(self, flags: str, source: str) -> float:
        """`%%tfdist FLAGS` with `source`; its wall time as the notebook sees it. What
        it prints (a sweep's text table) is kept in `self.printed`; an error propagates."""
        out = io.StringIO()
        began = time.perf_counter()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                self.value = self.shell.run_cell_magic("tfdist", flags, source)
        finally:
            self.printed = out.getvalue()
        return time.perf_counter() - began

    def stop(self) -> None:
        if self.cluster is not None:
            cluster, self.cluster = self.cluster, None
            try:
                self.line("stop")
            finally:
                if cluster in live_clusters:
                    live_clusters.remove(cluster)
