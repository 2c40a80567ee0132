"""Run every corpus program on 2 workers under several starts and print a table:
program x mode -> pass, or the first problem's first line; then the passes per mode.

    python tests/corpus/compare_modes.py                    # modes default, 3, 2
    python tests/corpus/compare_modes.py --modes 2 --programs tf_keras tf_custom_training
    python tests/corpus/compare_modes.py --no-reference     # workers only: faster
    python tests/corpus/compare_modes.py --silence 60       # a machine loaded by other work

A program is run under every mode asked for, whatever its own KERAS says ("default" is
what a bare `%tfdist start` gives). It passes a mode by the test's rules
(tests/test_corpus.py): no error, identical weights on both workers, a finite loss
within TOLERANCE of the one-process run in the same Keras (EXPECT_ERROR programs: the
expected error both ways, and the hint). With --no-reference the one-process run is
skipped and the loss only has to be finite. Each program's outputs are kept in the
working directory printed first (<mode>/<program>/workers.log, one-process.log). Needs
PYTHONPATH set to the checkout.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from corpus import harness  # noqa: E402


def run_mode(mode: str, names: list[str], directory: str, reference: bool,
             silence: float | None = None) -> dict[str, str]:
    """program -> "pass" or its first problem, for one mode on one cluster."""
    results: dict[str, str] = {}
    try:
        cluster = harness.CorpusCluster(mode, os.path.join(directory, f"keras-{mode}"),
                                        silence=silence)
    except Exception as exc:   # no cluster: every program of the mode says why
        line = f"start failed: {type(exc).__name__}: {str(exc).strip().splitlines()[0]}"
        return {name: line for name in names}
    try:
        for name in names:
            results[name] = run_program(cluster, name, reference)
            print(f"[{mode}] {name}: {results[name]}", flush=True)
    finally:
        cluster.close()
    return results


def run_program(cluster: harness.CorpusCluster, name: str, reference: bool) -> str:
    started = time.monotonic()
    program = harness.load_program(name)
    try:
        workers = harness.run_on_workers(cluster, program)
    except Exception as exc:   # a cell past its deadline: the next program still runs
        print(f"[{cluster.mode}] {name}: {exc}", flush=True)
        return f"harness: {type(exc).__name__}: {str(exc).strip().splitlines()[0]}"
    one = None
    if reference:
        one = harness.run_one_process(program, os.path.join(
            cluster.directory, name, "one-process"), cluster.legacy_keras)
    _keep_outputs(os.path.join(cluster.directory, name), workers, one)
    found = harness.problems(program, workers, one)
    took = f" ({time.monotonic() - started:.0f} s)"
    return ("pass" if not found else found[0]) + took


def _keep_outputs(directory: str, workers: harness.WorkerRun,
                  one: harness.ReferenceRun | None) -> None:
    """Each run's whole output next to it, for reading why a program failed."""
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "workers.log"), "w") as f:
        f.write(workers.output)
    if one is not None:
        with open(os.path.join(directory, "one-process.log"), "w") as f:
            f.write(one.output)


def table(results: dict[str, dict[str, str]], names: list[str], width: int) -> str:
    modes = list(results)
    rows = [["program", *[f"--keras {m}" if m != "default" else "default" for m in modes]]]
    for name in names:
        rows.append([name, *[results[m][name][:width] for m in modes]])
    rows.append(["passes", *[f"{sum(r.startswith('pass') for r in results[m].values())}"
                             f"/{len(names)}" for m in modes]])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(" | ".join(cell.ljust(w) for cell, w in zip(row, widths)) for row in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modes", nargs="+", default=["default", "3", "2"],
                        choices=sorted(harness.MODES))
    parser.add_argument("--programs", nargs="+", default=None,
                        help="program module names (default: all)")
    parser.add_argument("--no-reference", action="store_true",
                        help="skip the one-process runs (the loss is only checked finite)")
    parser.add_argument("--silence", type=float, default=None, metavar="S",
                        help="declare a worker lost after S silent seconds instead of the "
                             "default (a machine so loaded that busy workers look dead)")
    parser.add_argument("--width", type=int, default=100, help="longest cell of the table")
    args = parser.parse_args(argv)
    names = args.programs or harness.program_names()
    unknown = sorted(set(names) - set(harness.program_names()))
    if unknown:
        parser.error(f"no such program: {', '.join(unknown)} (see tests/corpus/programs/)")
    directory = harness.scratch_directory()
    print(f"working directory: {directory}", flush=True)
    results = {mode: run_mode(mode, names, directory, not args.no_reference, args.silence)
               for mode in args.modes}
    print(table(results, names, args.width))
    return 0


if __name__ == "__main__":
    sys.exit(main())
