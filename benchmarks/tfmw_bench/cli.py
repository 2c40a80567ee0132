"""Options, the rounds in their order, and what happens on exit (cleanup, table, JSON)."""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import signal
import statistics
import tempfile

from tfmw_notebook.cluster.tfcluster import DEFAULT_KERAS

from . import __doc__ as OVERVIEW
from . import keras_choice
from .common import (
    EXTRA_BOOTS,
    WARM_CELLS,
    WORKERS,
    attempt,
    cleanup,
    job_cell,
    progress,
    report_failure,
    terminate,
)
from .floor import run_floor
from .ray_train import ray_available, run_ray
from .report import new_report, summarize, write_json
from .table import print_keras_comparison, print_table
from .tfmw import start_shared, tfmw_boot_only, tfmw_round
from .threads import split_threads, threads_round

BENCH_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_JSON = os.path.join(BENCH_DIR, "results", "latest.json")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=OVERVIEW.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=9,
                        help="rounds (default 9: a verdict needs a stable median)")
    parser.add_argument("--job", choices=("dense", "cnn"), default="dense",
                        help="dense: a small dense model, fast steps (default); cnn: the "
                             "tutorial's CNN, heavier steps")
    parser.add_argument("--keras", choices=("3", "2", "both"), default=str(DEFAULT_KERAS),
                        help="the Keras every contender runs: 3 (as TensorFlow ships it), "
                             "2 (tf-keras), or both, round by round, with Keras 3 against "
                             f"tf-keras side by side (default {DEFAULT_KERAS}, the package's)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 1 round, 30 steps, 10 trivial cells")
    parser.add_argument("--skip-cold", action="store_true",
                        help="start one tfmw cluster up front; measure warm cells only")
    parser.add_argument("--skip-ray", action="store_true",
                        help="do not run Ray Train even if installed")
    parser.add_argument("--ray-rounds", type=int, default=3, metavar="K",
                        help="run Ray Train in the first K rounds only (default 3: about "
                             "100 s a round)")
    parser.add_argument("--threads-experiment", action="store_true",
                        help="also: floor fit with TF's default thread pools vs "
                             "intra = inter = cores // workers")
    parser.add_argument("--checkpoints-in-place", action="store_true",
                        help="also: the default cell saved as before snapshots (every worker "
                             "writing a checkpoint on its training thread)")
    parser.add_argument("--trivial", type=int, default=None,
                        help="trivial cells per round (default 50, 10 with --quick)")
    parser.add_argument("--report", metavar="PATH", default=None,
                        help="print the table of a saved run (its JSON) again, with this "
                             "version's summary and verdicts; runs nothing")
    parser.add_argument("--json", default=DEFAULT_JSON, metavar="PATH",
                        help="where to write the results (default benchmarks/results/latest.json)")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error(f"--repeat must be >= 1, got {args.repeat}")
    if args.quick:
        args.repeat = 1
    args.epochs, args.steps = (2, 15) if args.quick else (3, 50 if args.job == "dense" else 20)
    if args.trivial is None:
        args.trivial = 10 if args.quick else 50
    return args


def _workdir(job: str) -> tuple[str, str]:
    """A scratch directory removed at exit, holding the job cell; returns (dir, cell path)."""
    workdir = tempfile.mkdtemp(prefix="tfmw-bench-")
    # Registered before any ipyparallel Cluster exists, so it runs after their own atexit
    # stop (which, after an interrupted start, still needs the profile directory).
    atexit.register(shutil.rmtree, workdir, ignore_errors=True)
    # Keep ipyparallel's profile, cluster files and logs out of ~/.ipython (engines inherit it).
    os.environ["IPYTHONDIR"] = os.path.join(workdir, "ipython")
    cell_path = os.path.join(workdir, "job_cell.py")
    with open(cell_path, "w") as f:
        f.write(job)
    return workdir, cell_path


def _round(entry, where, args, job, cell_path, workdir, shared, use_ray, index):
    """floor, tfmw, Ray, threads, in that order; one failing does not stop the others.
    The machine's load average is recorded before and after (a busy machine explains
    an outlying round)."""
    entry["load_before"] = os.getloadavg()[0]
    try:
        _contenders(entry, where, args, job, cell_path, workdir, shared, use_ray, index)
    finally:
        entry["load_after"] = os.getloadavg()[0]
        progress(f"{where} load average {entry['load_before']:.2f} -> "
                 f"{entry['load_after']:.2f}")


def _contenders(entry, where, args, job, cell_path, workdir, shared, use_ray, index):
    floor = attempt(entry, "floor", where,
                    lambda: run_floor(workdir, cell_path, fits=1 + WARM_CELLS))
    if floor:
        floor["warm_cell"] = statistics.median(floor["cells"][1:])
        floor["warm_fit"] = statistics.median(floor["fits"][1:])
        progress(f"{where} floor: boot {floor['boot']:.2f} s, cell {floor['cells'][0]:.2f} s, "
                 f"warm cells {', '.join(f'{c:.2f}' for c in floor['cells'][1:])} s, "
                 f"wall {floor['wall']:.2f} s")

    # Filled as it goes: a failure late in the round keeps what was measured before it.
    tfmw = entry["tfmw"] = {}
    try:
        tfmw_round(tfmw, where, job, args.trivial, shared, dashboard_on_first=index % 2 == 1,
                   in_place=args.checkpoints_in_place)
    except Exception as exc:
        tfmw["failed"] = report_failure(where, "tfmw", exc)

    if not shared and not args.quick and floor and "boot" in tfmw:
        _extra_boots(entry, where, workdir, cell_path, index)

    if use_ray and index < args.ray_rounds:
        ray = attempt(entry, "ray", where, lambda: run_ray(job, workdir))
        if ray:
            progress(f"{where} ray: init {ray['init']:.1f} s, first fit {ray['first']:.1f} s, "
                     f"second fit {ray['second']:.1f} s")

    if args.threads_experiment:
        threads_round(entry, where, workdir, cell_path, default_first=index % 2 == 0)


def _extra_boots(entry, where, workdir, cell_path, index) -> None:
    """EXTRA_BOOTS start-ups on each side, alternating which goes first."""
    floor, tfmw = entry["floor"], entry["tfmw"]
    floor["extra_boots"], tfmw["extra_boots"] = [], []

    def floor_boot():
        floor["extra_boots"].append(run_floor(workdir, cell_path, fits=0)["boot"])

    def tfmw_boot():
        tfmw["extra_boots"].append(tfmw_boot_only())

    try:
        for k in range(EXTRA_BOOTS):
            for side in ((floor_boot, tfmw_boot) if (index + k) % 2 == 0
                         else (tfmw_boot, floor_boot)):
                side()
    except Exception as exc:   # the round's other numbers stand
        tfmw["extra_boots_failed"] = report_failure(where, "extra boots", exc)
    progress(f"{where} extra boots: floor "
             f"{', '.join(f'{b:.2f}' for b in floor['extra_boots'])} s, tfmw "
             f"{', '.join(f'{b:.2f}' for b in tfmw['extra_boots'])} s")


def _rounds(reports: dict, args, job, cell_path, workdir, use_ray) -> None:
    """`args.repeat` rounds for each Keras; with both, each round runs them in turn
    (alternating which goes first), so a slow spell of the machine hits both alike."""
    shared = {}
    if args.skip_cold:   # one warm cluster per Keras for all rounds
        for keras in reports:
            keras_choice.current = keras
            shared[keras] = start_shared(job)
    for index in range(args.repeat):
        order = list(reports) if index % 2 == 0 else list(reversed(reports))
        for keras in order:
            keras_choice.current = keras
            entry = {"round": index + 1}
            reports[keras]["rounds"].append(entry)
            label = f" {keras_choice.name()}" if len(reports) > 1 else ""
            _round(entry, f"round {index + 1}/{args.repeat}{label}", args, job, cell_path,
                   workdir, shared.get(keras), use_ray and keras == 2, index)


def _announce(report, args) -> None:
    m = report["machine"]
    progress(f"machine: {m['cores']} cores ({m['cpu_model']}), python {m['python']}, "
             f"TF {m['tensorflow']}, load {m['loadavg_at_start'][0]:.2f}")
    progress(f"job: {WORKERS} workers, {report['job']['steps']} steps, repeat {args.repeat}"
             + (", skip cold" if args.skip_cold else "")
             + (f", threads experiment (k={split_threads()})" if args.threads_experiment
                else ""))
    if report["ray"] != "installed":
        progress(report["ray"])


def _warm_the_notebook_side() -> None:
    """Import matplotlib and draw once, as a kernel does once in its life: the dashboard
    rows then measure what every cell costs, not the first one's imports."""
    from tfmw_notebook.widgets.curves import render_curves_png
    from tfmw_notebook.widgets.metrics import MetricsStore

    render_curves_png(MetricsStore())


def _reprint(path: str) -> int:
    import json

    with open(path) as f:
        report = json.load(f)
    report["summary"] = summarize(report["rounds"], report["job"]["steps"])
    print_table(report, report["ray"] == "installed", None)
    return 0


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.report:
        return _reprint(args.report)
    signal.signal(signal.SIGTERM, terminate)
    job = job_cell(args.epochs, args.steps, args.job)
    workdir, cell_path = _workdir(job)
    use_ray = not args.skip_ray and ray_available()
    reports = _new_reports(args, job, use_ray)
    _announce(next(iter(reports.values())), args)

    exit_code = 0
    _warm_the_notebook_side()
    try:
        _rounds(reports, args, job, cell_path, workdir, use_ray)
        for report in reports.values():
            report["complete"] = True
    except KeyboardInterrupt:
        progress("interrupted: cleaning up")
        exit_code = 130
    finally:
        cleanup()
        _finish(reports, args, use_ray)
    return exit_code


def _new_reports(args, job: str, use_ray: bool) -> dict:
    """One report per Keras run, Keras 3's first."""
    reports = {}
    for keras in ((3, 2) if args.keras == "both" else (int(args.keras),)):
        keras_choice.current = keras
        # Ray's trainer runs tf-keras only (its workers set TF_USE_LEGACY_KERAS=1).
        ray = ("installed" if use_ray and keras == 2 else
               "skipped (--skip-ray)" if args.skip_ray else
               "skipped (Ray's trainer runs tf-keras)" if use_ray else
               "ray not installed: skipped")
        reports[keras] = new_report(args, job, ray)
    return reports


def _finish(reports: dict, args, use_ray: bool) -> None:
    """Each Keras' table and JSON; with both, Keras 3 against tf-keras."""
    for keras, report in reports.items():
        report["machine"]["loadavg_at_end"] = list(os.getloadavg())
        report["summary"] = summarize(report["rounds"], report["job"]["steps"])
        if not report["rounds"]:
            continue
        keras_choice.current = keras
        if len(reports) > 1:
            print(f"\n== {keras_choice.name()} ==")
        print_table(report, use_ray and keras == 2,
                    split_threads() if args.threads_experiment else None)
        path = args.json if len(reports) == 1 else args.json.replace(".json", f"-keras{keras}.json")
        write_json(report, path)
        progress(f"wrote {path}")
    if len(reports) == 2 and all(r["rounds"] for r in reports.values()):
        print_keras_comparison(reports[3]["summary"], reports[2]["summary"])
