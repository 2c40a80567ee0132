"""What recording a run costs: the same `%%tfdist` fit with and without its run record.

Both sides are the real magic on one warm cluster (magic_shell.py). "without" switches
off the chief's RunRecorder on the workers, so the cell returns no run and the magic
writes no record; everything else (the magic, the cell, its options) is the same. Each
round runs `pairs` with/without pairs, alternating which side goes first.
"""

from __future__ import annotations

import time

from .common import CELL_TIMEOUT, progress
from .magic_shell import RECORDING_SWITCH, MagicShell
from .report import judge, stats

# The goal of issue 26: recording a run costs <= 1% of a 5-second fit.
GOALS = {"record_cell": ("<=", 1.01, "<= 1.01x"), "record_loop": ("<=", 1.01, "<= 1.01x")}
FLAGS = f"--no-dashboard --no-checkpoint --timeout {CELL_TIMEOUT:g}"
SIDES = ("without", "with")

_writes: list[tuple[float, int]] = []   # each CellRuns.write here: (seconds, records)


def clock_record_writes() -> None:
    """Time every CellRuns.write (the magic writes each fit's record through it)."""
    from tfmw_notebook.cluster.runs import run_capture

    real = run_capture.CellRuns.write

    def write(self, *args, **kwargs):
        began = time.perf_counter()
        written = real(self, *args, **kwargs)
        _writes.append((time.perf_counter() - began, len(written)))
        return written

    run_capture.CellRuns.write = write   # type: ignore[method-assign]


def prepare(magic: MagicShell, job: str) -> None:
    """The switch on the workers, the write clock here, and one untimed cell (warm)."""
    magic.cluster.run(RECORDING_SWITCH, record=False)
    clock_record_writes()
    magic.cell(FLAGS, job)


def _switch(magic: MagicShell, record: bool) -> None:
    magic.cluster.run(f"_bench['record'] = {record}\n_bench['callback_seconds'].clear()",
                      record=False)


def _one_cell(magic: MagicShell, job: str, side: str, out: dict) -> None:
    _switch(magic, side == "with")
    written = len(_writes)
    seconds = magic.cell(FLAGS, job)
    chief = magic.cluster.pull(["bench_loop_seconds", "bench_fit_seconds", "_bench"], rank=0)
    out[side].append(seconds)
    out[f"{side}_loops"].append(chief["bench_loop_seconds"])
    out[f"{side}_fits"].append(chief["bench_fit_seconds"])
    calls, writes = chief["_bench"]["callback_seconds"], _writes[written:]
    records = sum(count for _, count in writes)
    if {bool(calls), records > 0} != {side == "with"}:   # the switch did what it says
        raise RuntimeError(f"the side {side} recording ran {len(calls)} RunRecorder calls "
                           f"and wrote {records} records")
    if side == "with":
        out["callback"].append(sum(s for _, s in calls))
        out["epoch_end"] += [s for name, s in calls if name == "on_epoch_end"]
        out["write"] += [took for took, _ in writes]


def record_round(magic: MagicShell, job: str, pairs: int, *, with_first: bool) -> dict:
    out: dict = {key: [] for side in SIDES for key in (side, f"{side}_loops", f"{side}_fits")}
    out.update(callback=[], epoch_end=[], write=[])
    for _ in range(pairs):
        for side in (reversed(SIDES) if with_first else SIDES):
            _one_cell(magic, job, side, out)
    return out


def summarize_record(rounds: list[dict]) -> dict:
    """Medians [min-max] of each side, their ratios, the absolute costs and the goals."""
    def every(key):
        return [v for r in rounds for v in r.get(key, [])]

    s = {key: stats(every(key)) for side in SIDES
         for key in (side, f"{side}_loops", f"{side}_fits")}
    s["callback_ms"] = stats(1000 * v for v in every("callback"))
    s["epoch_end_ms"] = stats(1000 * v for v in every("epoch_end"))
    s["write_ms"] = stats(1000 * v for v in every("write"))
    s["ratios"] = {key: s[w]["median"] / s[wo]["median"] if s[w] and s[wo] else None
                   for key, w, wo in (("cell", "with", "without"),
                                      ("loop", "with_loops", "without_loops"),
                                      ("fit", "with_fits", "without_fits"))}
    # Recording's own work (the callback on the chief, the record's write) over the fit.
    own = [(c + w) / f for r in rounds
           for c, w, f in zip(r.get("callback", []), r.get("write", []), r.get("with_fits", []))]
    s["own_share"] = stats(own)
    cells = [(r["with"], r["without"]) for r in rounds if r.get("with") and r.get("without")]
    loops = [(r["with_loops"], r["without_loops"]) for r in rounds
             if r.get("with_loops") and r.get("without_loops")]
    s["goals"] = {key: {"goal": text, **judge(pairs, key, op, bound)}
                  for (key, (op, bound, text)), pairs in zip(GOALS.items(), (cells, loops))}
    return s


def log_round(where: str, out: dict) -> None:
    def seconds(key):
        return ", ".join(f"{v:.2f}" for v in out[key])

    progress(f"{where} without {seconds('without')} s, with {seconds('with')} s; "
             f"callback {', '.join(f'{1000 * v:.1f}' for v in out['callback'])} ms, "
             f"write {', '.join(f'{1000 * v:.1f}' for v in out['write'])} ms")
