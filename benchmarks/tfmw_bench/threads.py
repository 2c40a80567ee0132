"""--threads-experiment: floor processes with TF's default thread pools vs split pools."""

from __future__ import annotations

import os

from .common import WORKERS, attempt, progress
from .floor import run_floor


def split_threads() -> int:
    """intra = inter = this many threads per worker: the cores shared out among workers."""
    return max(1, (os.cpu_count() or 1) // WORKERS)


def threads_round(entry: dict, where: str, workdir: str, cell_path: str,
                  *, default_first: bool) -> None:
    """Both variants, each in its own floor run (a failed one is recorded)."""
    split = split_threads()
    order = [0, split] if default_first else [split, 0]
    entry["threads"] = {}
    for threads in order:
        name = "default" if threads == 0 else "split"
        # Two fits per process: the second is the warm fit.
        result = attempt(entry["threads"], name, where,
                         lambda threads=threads: run_floor(workdir, cell_path, threads=threads,
                                                           fits=2))
        if result:
            result["threads"] = threads
            progress(f"{where} threads {name} ({threads or 'TF default'}): warm fit "
                     f"{result['fits'][1]:.2f} s (cold {result['fits'][0]:.2f} s)")
