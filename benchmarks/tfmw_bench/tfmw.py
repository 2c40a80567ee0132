"""The tfmw contender: TFCluster start, training cells, trivial cells, dashboard on/off."""

from __future__ import annotations

import contextlib
import io
import statistics
import time

from tfmw_notebook.protocol.run_options import CellOptions

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


def dashboard_cell(cluster, job: str, *, on: bool) -> dict:
    """The training cell with the dashboard off (CellOptions()) or on, as the magic does it:
    report events, Keras progress quiet, events fed to a LiveRun(widgets=True) while the
    cell runs (matplotlib PNG redraws, progress widgets), then the final PNG."""
    if not on:
        return tfmw_cell(cluster, job, options=CellOptions())
    from tfmw_notebook.widgets.live import LiveRun

    live = LiveRun(widgets=True)
    # Outside a kernel IPython's display() prints the widget's repr: swallow it.
    with contextlib.redirect_stdout(io.StringIO()):
        result = tfmw_cell(cluster, job, options=CellOptions(report=True, quiet_progress=True),
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


def tfmw_round(out: dict, where: str, job: str, trivial: int, shared,
               *, dashboard_on_first: bool) -> None:
    """Cold start and cell (unless a shared cluster is given), warm cell, trivial cells,
    dashboard off/on; `out` is filled as it goes."""
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
        # Off and on alternate, DASHBOARD_PAIRS pairs; each side's median is the round's.
        cells: dict[str, list] = {"off": [], "on": []}
        for _ in range(DASHBOARD_PAIRS):
            for on in ((True, False) if dashboard_on_first else (False, True)):
                cells["on" if on else "off"].append(dashboard_cell(cluster, job, on=on))
        out["dashboard"] = {name: _median_of(runs) for name, runs in cells.items()}
        progress(f"{where} dashboard off "
                 f"{', '.join(f'{c:.2f}' for c in out['dashboard']['off']['all'])} s, on "
                 f"{', '.join(f'{c:.2f}' for c in out['dashboard']['on']['all'])} s")
    finally:
        if cluster is not None and cluster is not shared:
            out["stop"] = tfmw_stop(cluster)
