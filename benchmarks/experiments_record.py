#!/usr/bin/env python
"""What recording a run costs: one ~5 s fit through `%%tfdist`, with and without its record.

On a warm 2-worker cluster driven through the real magic in an in-process IPython shell
(the magic writes run records; `TFCluster.run` alone writes none), the same cell runs
with the chief's RunRecorder and the record's write (what every `%%tfdist` fit gets) and
without them (switched off on the workers: no run, no record), alternated, `--pairs`
pairs a round for `--rounds` rounds. Prints medians [min-max], ratios, the absolute costs
(the chief's callback per fit and per epoch, the record's write) and a verdict against
the goal: recording costs <= 1% of the fit. See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

from tfmw_bench.common import cleanup, job_cell, progress, terminate  # the package here
from tfmw_bench.magic_shell import MagicShell
from tfmw_bench.record_cost import log_round, prepare, record_round, summarize_record
from tfmw_bench.report import machine_info, write_json
from tfmw_bench.runs_dir import scratch_directory
from tfmw_bench.table import COMPARE, RULE, cell, goal_text, ratio_text, row

HERE = os.path.dirname(os.path.abspath(__file__))


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--rounds", type=int, default=9, help="rounds (default 9)")
    parser.add_argument("--pairs", type=int, default=3,
                        help="with/without pairs per round (default 3)")
    parser.add_argument("--epochs", type=int, default=10, help="epochs per fit (default 10)")
    parser.add_argument("--steps", type=int, default=85,
                        help="steps per epoch (default 85: a fit of about 5 s here)")
    parser.add_argument("--json", default=os.path.join(HERE, "results", "record.json"))
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.pairs < 1:
        parser.error("--rounds and --pairs must be >= 1")
    return args


def print_table(report: dict) -> None:
    s, j, m = report["summary"], report["job"], report["machine"]
    lines = [
        f"recording a run  {report['date']}  {m['hostname']}, {m['cores']} cores, "
        f"load {report['load'][0]:.2f} -> {report['load'][1]:.2f}",
        f"job: {j['workers']} workers, {j['epochs']}x{j['steps_per_epoch']} steps, Keras 3, "
        f"%%tfdist {j['flags']}; rounds {len(report['rounds'])} x {j['pairs']} pairs",
        row(COMPARE, "metric (s unless noted)", "without record", "with record", "ratio",
            "goal"),
        row(COMPARE, "cell (as the notebook waits)", cell(s["without"]), cell(s["with"]),
            ratio_text(s["ratios"]["cell"]), goal_text(s, "record_cell")),
        row(COMPARE, "  training loop (chief)", cell(s["without_loops"]), cell(s["with_loops"]),
            ratio_text(s["ratios"]["loop"]), goal_text(s, "record_loop")),
        row(COMPARE, "  model.fit (chief)", cell(s["without_fits"]), cell(s["with_fits"]),
            ratio_text(s["ratios"]["fit"])),
        row(COMPARE, "RunRecorder per fit (chief) ms", "-", cell(s["callback_ms"])),
        row(COMPARE, "  its on_epoch_end ms", "-", cell(s["epoch_end_ms"])),
        row(COMPARE, "record write (notebook) ms", "-", cell(s["write_ms"])),
    ]
    if s["own_share"]:
        lines.append(f"recording's own work (callback + write) / model.fit: median "
                     f"{100 * s['own_share']['median']:.3f}% (max "
                     f"{100 * s['own_share']['max']:.3f}%)")
    print(RULE)
    print("\n".join(lines))
    print(RULE, flush=True)


def main(argv=None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, terminate)
    scratch_directory("tfmw-record-bench-")
    job = job_cell(args.epochs, args.steps)
    report = {"machine": machine_info(), "rounds": [], "load": [os.getloadavg()[0]],
              "job": {"workers": 2, "epochs": args.epochs, "steps_per_epoch": args.steps,
                      "pairs": args.pairs, "flags": "--no-dashboard --no-checkpoint",
                      "cell": job}}
    from datetime import datetime

    report["date"] = datetime.now().astimezone().isoformat(timespec="seconds")
    magic = MagicShell()
    exit_code = 0
    try:
        progress(f"%tfdist start: {magic.start():.1f} s")
        prepare(magic, job)
        for index in range(args.rounds):
            out = record_round(magic, job, args.pairs, with_first=index % 2 == 1)
            out["load"] = os.getloadavg()[0]
            report["rounds"].append(out)
            log_round(f"round {index + 1}/{args.rounds}", out)
    except KeyboardInterrupt:
        progress("interrupted: cleaning up")
        exit_code = 130
    finally:
        magic.stop()
        cleanup()
    report["load"].append(os.getloadavg()[0])
    if report["rounds"]:
        report["summary"] = summarize_record(report["rounds"])
        print_table(report)
        write_json(report, args.json)
        progress(f"wrote {args.json}")
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
