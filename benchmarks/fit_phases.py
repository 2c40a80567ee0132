#!/usr/bin/env python
"""Where the default cell's extra time goes: each phase of a fit, timed on every worker.

The job cell of bench.py (2 workers, tf-keras unless `--keras 3`) runs on one warm cluster
plain (no dashboard, no checkpoints) and as the magic runs it by default (the dashboard's
reporting + a checkpoint every epoch), in turns, `--turns` of them; with `--unwritten` a
third side, the default cell with its checkpoint writes dropped (read, never written: an
experiment only), to tell the writer thread's cost from the reads'. A callback stamps
every epoch's beginning and end on each worker; printed per worker: each phase's median
on each side and the median of the turns' differences against the plain cell. "gap N"
is the time between epoch N's end and epoch N+1's beginning (the epoch's checkpoint and
events), "end" from the last epoch's end to the fit's, "after fit" from there to the
cell's end (the plain cell's end-of-fit snapshot).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import tempfile

from tfmw_bench.common import WORKERS, job_cell, progress  # the package here

EPOCHS, STEPS = 3, 50

# Defined on the workers before the turns: the callback that stamps, and the record.
PHASE_CLOCK = """\
import time as _phase_time

phase_stamps = {}

class _PhaseClock(tf.keras.callbacks.Callback):
    def on_train_begin(self, logs=None):
        phase_stamps["train_begin"] = _phase_time.perf_counter()

    def on_epoch_begin(self, epoch, logs=None):
        phase_stamps[f"epoch_begin_{epoch}"] = _phase_time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        phase_stamps[f"epoch_end_{epoch}"] = _phase_time.perf_counter()

    def on_train_end(self, logs=None):
        phase_stamps["train_end"] = _phase_time.perf_counter()
"""


def stamped_job() -> str:
    """bench.py's job cell, stamping the cell's start, each epoch, and the cell's end."""
    plain = job_cell(EPOCHS, STEPS)
    job = plain.replace("callbacks=[_LoopClock()]", "callbacks=[_LoopClock(), _PhaseClock()]")
    if job == plain:
        raise ValueError("bench.py's job cell no longer passes callbacks=[_LoopClock()]: "
                         "update stamped_job() to add the phase clock where it does")
    return ("phase_stamps.clear()\nphase_stamps['cell_begin'] = _phase_time.perf_counter()\n"
            f"{job}phase_stamps['cell_end'] = _phase_time.perf_counter()\n")


def drop_writes(drop: bool) -> None:
    """On a worker: checkpoint writes handed over are dropped (`drop`), or written."""
    from tfmw_notebook.worker.writes import background_writes

    if not hasattr(background_writes, "_bench_hand_over"):
        background_writes._bench_hand_over = background_writes.hand_over
    background_writes.hand_over = ((lambda write: None) if drop
                                   else background_writes._bench_hand_over)


def phases(stamps: dict) -> dict[str, float]:
    """A fit's phases in ms, from one worker's stamps."""
    found = {"before fit": stamps["train_begin"] - stamps["cell_begin"]}
    for epoch in range(EPOCHS):
        found[f"epoch {epoch}"] = stamps[f"epoch_end_{epoch}"] - stamps[f"epoch_begin_{epoch}"]
        if epoch + 1 < EPOCHS:
            found[f"gap {epoch}"] = (stamps[f"epoch_begin_{epoch + 1}"]
                                     - stamps[f"epoch_end_{epoch}"])
    found["end"] = stamps["train_end"] - stamps[f"epoch_end_{EPOCHS - 1}"]
    found["after fit"] = stamps["cell_end"] - stamps["train_end"]
    return {name: seconds * 1000.0 for name, seconds in found.items()}


def one_cell(cluster, job: str, side: str, checkpoints: str) -> list[dict[str, float]]:
    from tfmw_notebook.protocol.run_options import CellOptions, CheckpointPolicy

    cluster.run(drop_writes, side == "unwritten")
    options = CellOptions()
    if side != "plain":
        policy = CheckpointPolicy(run_dir=tempfile.mkdtemp(prefix="run-", dir=checkpoints))
        options = CellOptions(report=True, quiet_progress=True, checkpoint=policy)
    with contextlib.redirect_stdout(io.StringIO()):
        cluster.run(job, options=options)
    return [phases(cluster.pull(["phase_stamps"], rank=rank)["phase_stamps"])
            for rank in range(WORKERS)]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--turns", type=int, default=30, help="turns of the sides (default 30)")
    parser.add_argument("--keras", type=int, choices=(2, 3), default=2)
    parser.add_argument("--unwritten", action="store_true",
                        help="also the default cell with its checkpoint writes dropped")
    args = parser.parse_args(argv)
    if args.turns < 1:
        parser.error("--turns must be >= 1")
    return args


def report(cells: dict[str, list], sides: list[str]) -> None:
    for rank in range(WORKERS):
        print(f"worker {rank}: ms, median (median of the turns' differences to plain)")
        for name in cells["plain"][0][rank]:
            base = [cell[rank][name] for cell in cells["plain"]]
            row = f"  {name:<11} plain {statistics.median(base):7.1f}"
            for side in sides[1:]:
                values = [cell[rank][name] for cell in cells[side]]
                diff = statistics.median(v - b for v, b in zip(values, base))
                row += f"   {side} {statistics.median(values):7.1f} ({diff:+6.1f})"
            print(row)


def main(argv=None) -> int:
    args = parse_args(argv)
    from tfmw_notebook import TFCluster

    sides = ["plain", "default"] + (["unwritten"] if args.unwritten else [])
    job = stamped_job()
    cluster = TFCluster.start(WORKERS, keras=args.keras, gpus_per_worker=0, timeout=180)
    try:
        cluster.run(PHASE_CLOCK)
        cluster.run(job)                                   # warm: traced, imported
        cells: dict[str, list] = {side: [] for side in sides}
        with tempfile.TemporaryDirectory(prefix="fit-phases-") as checkpoints:
            for turn in range(args.turns):
                for side in sides[turn % len(sides):] + sides[:turn % len(sides)]:
                    cells[side].append(one_cell(cluster, job, side, checkpoints))
                progress(f"turn {turn + 1}/{args.turns}")
    finally:
        cluster.stop()
    print(f"Keras {args.keras}, {args.turns} turns, {EPOCHS} epochs of {STEPS} steps")
    report(cells, sides)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
