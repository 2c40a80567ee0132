"""The tfmw contender: TFCluster start, training cells, trivial cells, and the cell
plain, with the dashboard, and as the magic runs it by default (dashboard + checkpoints)."""

from __future__ import annotations

import contextlib
import io
import os
import statistics
import tempfile
import time

from tfmw_notebook.protocol.run_options import CellOptions, CheckpointPolicy

from . import keras_choice
from .common import (
    CELL_TIMEOUT,
    DASHBOARD_PAIRS,
    START_TIMEOUT,
    TRIVIAL_TIMEOUT,
    WARM_CELLS,
    WORKERS,
    BenchError,
    live_clusters,
    progress,
)


def tfmw_start():
    from tfmw_notebook import TFCluster

    began = time.perf_counter()
    # On the CPU like the floor, which hides GPUs (CUDA_VISIBLE_DEVICES=-1).
    cluster = TFCluster.start(WORKERS, timeout=START_TIMEOUT, keras=keras_choice.current,
                              gpus_per_worker=0)
    seconds = time.perf_counter() - began
    live_clusters.append(cluster)
    return cluster, seconds


def tfmw_boot_only() -> float:
    """Start a cluster and stop it: the start-up's seconds."""
    cluster, seconds = tfmw_start()
    tfmw_stop(cluster)
    return seconds


def tfmw_stop(cluster) -> float:
    began = time.perf_counter()
    try:
        cluster.stop()
    finally:
        if cluster in live_clusters:
            live_clusters.remove(cluster)
    return time.perf_counter() - began


def _run(cluster, source: str, **kwargs):
    """cluster.run, except that Ctrl-C stops the benchmark. TFCluster.run turns an
    interrupt into WorkerFailed(reason="interrupt") after restarting the workers (a
    second Ctrl-C during that restart skips it)."""
    from tfmw_notebook.errors import WorkerFailed

    try:
        return cluster.run(source, **kwargs)
    except WorkerFailed as failure:
        if failure.reason == "interrupt":
            raise KeyboardInterrupt(str(failure)) from None
        raise


def tfmw_cell(cluster, source: str, *, options, on_data=None,
              timeout: float = CELL_TIMEOUT, inner: bool = True) -> dict:
    """Run a cell; `seconds` is its wall time as the notebook sees it, `kernel_cpu` the
    CPU seconds this process (the notebook's side: client, dashboard) used meanwhile."""
    out, err = io.StringIO(), io.StringIO()
    began, cpu_began = time.perf_counter(), time.process_time()
    _run(cluster, source, options=options, on_data=on_data, timeout=timeout,
         stdout=out, stderr=err)
    result = {"seconds": time.perf_counter() - began,
              "kernel_cpu": time.process_time() - cpu_began}
    if inner:  # the chief's own model.fit time, read after the clock stopped
        values = cluster.pull(["bench_fit_seconds", "bench_loop_seconds", "bench_loss"], rank=0)
        result["fit"] = values["bench_fit_seconds"]
        result["loop"] = values["bench_loop_seconds"]
        result["loss"] = values["bench_loss"]
    if err.getvalue().strip():
        result["stderr_tail"] = err.getvalue().strip().splitlines()[-3:]
    return result


def start_shared(job: str):
    """--skip-cold: one cluster for every round, having run the job once already."""
    cluster, seconds = tfmw_start()
    tfmw_cell(cluster, job, options=CellOptions())
    progress(f"shared cluster up in {seconds:.1f} s and warmed up")
    return cluster


def trivial_cells(cluster, count: int) -> list[float]:
    times = []
    for _ in range(count):
        began = time.perf_counter()
        _run(cluster, "x = 1", options=CellOptions(), timeout=TRIVIAL_TIMEOUT)
        times.append((time.perf_counter() - began) * 1000.0)
    return times


def dashboard_cell(cluster, job: str, *, on: bool, checkpoints: str | None = None) -> dict:
    """The training cell with the dashboard off (CellOptions()) or on, as the magic does it:
    report events, Keras progress quiet, events fed to a LiveRun(widgets=True) while the
    cell runs (matplotlib PNG redraws, progress widgets), then the final PNG. With
    `checkpoints` (a directory), also the automatic checkpoints the magic saves by
    default: every epoch, none pruned, into a run directory of the cell's own."""
    if not on:
        return tfmw_cell(cluster, job, options=CellOptions())
    from tfmw_notebook.widgets.live import LiveRun

    checkpoint = None
    if checkpoints is not None:
        checkpoint = CheckpointPolicy(run_dir=tempfile.mkdtemp(prefix="run-", dir=checkpoints))
    live = LiveRun(widgets=True)
    # Outside a kernel IPython's display() prints the widget's repr: swallow it.
    with contextlib.redirect_stdout(io.StringIO()):
        result = tfmw_cell(cluster, job, options=CellOptions(report=True, quiet_progress=True,
                                                             checkpoint=checkpoint),
                           on_data=live.on_data)
        # LiveRun.finish() needs the display handle of a kernel (display() returns None
        # outside one); do its work: the final PNG and the summary line.
        view = getattr(live, "_view", None)
        began = time.perf_counter()
        if view is not None:
            view.final_png()
            view.summary_line()
            view.close()
        result["finish"] = time.perf_counter() - began
    result["redraws"] = getattr(view, "redraws", None)
    result["ranks_reporting"] = len(live.store.ranks)
    if not live.store.ranks:
        raise BenchError("dashboard on: no worker reported any event")
    return result


def _median_of(results: list[dict]) -> dict:
    """Several runs of one cell as one: the median of each number, and every wall time."""
    merged = {"all": [r["seconds"] for r in results]}
    if all("loop" in r for r in results):   # the chief's training loops, in order
        merged["all_loops"] = [r["loop"] for r in results]
    for key in results[0]:
        values = [r[key] for r in results if isinstance(r.get(key), (int, float))]
        if values and len(values) == len(results):
            merged[key] = statistics.median(values)
    return merged


# The training cell three ways: "off" plain (no dashboard, no checkpoints), "on" with the
# dashboard, "default" as the magic runs it when told nothing (dashboard + checkpoints);
# with --checkpoints-in-place a fourth, "in_place": the default cell saved as before
# snapshots, every worker writing (the others a throw-away copy) on its training thread.
SIDES = ("off", "on", "default")
IN_PLACE = "in_place"
# Run on the workers before each cell: saved as before (weights_snapshot.take returning
# None is the saver's path for a TensorFlow without the snapshot's parts).
_IN_PLACE_SWITCH = """\
from tfmw_notebook.worker.writes import weights_snapshot as _snapshots
_snapshots.__dict__.setdefault("_bench_take", _snapshots.take)
_snapshots.take = (lambda model: None) if {in_place} else _snapshots._bench_take
"""


def _sides_in_turn(cluster, job: str, on_first: bool, in_place: bool = False) -> dict:
    """DASHBOARD_PAIRS turns of the sides, each turn in another order (the first side of a
    turn rotates; `on_first` reverses the rotation); each side's median is the round's."""
    sides = SIDES + ((IN_PLACE,) if in_place else ())
    cells: dict[str, list] = {side: [] for side in sides}
    with tempfile.TemporaryDirectory(prefix="bench-checkpoints-", dir=os.getcwd()) as saved:
        for turn in range(DASHBOARD_PAIRS):
            first = (-turn if on_first else turn) % len(sides)
            for side in sides[first:] + sides[:first]:
                if in_place:
                    _run(cluster, _IN_PLACE_SWITCH.format(in_place=side == IN_PLACE),
                         options=CellOptions(), timeout=TRIVIAL_TIMEOUT)
                cells[side].append(dashboard_cell(
                    cluster, job, on=side != "off",
                    checkpoints=saved if side in ("default", IN_PLACE) else None))
    return {side: _median_of(runs) for side, runs in cells.items()}


def tfmw_round(out: dict, where: str, job: str, trivial: int, shared,
               *, dashboard_on_first: bool, in_place: bool = False) -> None:
    """Cold start and cell (unless a shared cluster is given), warm cell, trivial cells,
    the cell plain, with the dashboard and by default; `out` is filled as it goes."""
    cluster = shared
    try:
        if cluster is None:
            cluster, out["boot"] = tfmw_start()
            progress(f"{where} tfmw: started in {out['boot']:.2f} s")
            out["cold"] = tfmw_cell(cluster, job, options=CellOptions())
            progress(f"{where} tfmw cold cell {out['cold']['seconds']:.2f} s "
                     f"(model.fit {out['cold']['fit']:.2f} s)")
        out["warm"] = _median_of([tfmw_cell(cluster, job, options=CellOptions())
                                  for _ in range(WARM_CELLS)])
        progress(f"{where} tfmw warm cells "
                 f"{', '.join(f'{c:.2f}' for c in out['warm']['all'])} s "
                 f"(model.fit {out['warm']['fit']:.2f} s)")
        out["trivial_ms"] = trivial_cells(cluster, trivial)
        progress(f"{where} trivial cell: median {statistics.median(out['trivial_ms']):.1f} ms "
                 f"over {trivial}")
        out["dashboard"] = _sides_in_turn(cluster, job, dashboard_on_first, in_place)
        progress(f"{where} " + "; ".join(
            f"{side} {', '.join(f'{c:.2f}' for c in cells['all'])} s"
            for side, cells in out["dashboard"].items()))
    finally:
        if cluster is not None and cluster is not shared:
            out["stop"] = tfmw_stop(cluster)
