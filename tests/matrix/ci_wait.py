"""CI runs the support matrix's oldest row (tests/matrix/run.py) while the suite's virtualenv
is made and checked; the suite then waits for it before its first test, so two clusters
never share the 2 cores. .ci/run names the row's process in TFMW_MATRIX_RUN."""

from __future__ import annotations

import os
import time

VARIABLE = "TFMW_MATRIX_RUN"
DEADLINE_SECONDS = 40 * 60     # the row's install and smoke have deadlines of their own


def wait_for_matrix_row(config) -> None:
    """In pytest's controller (not in xdist's workers, which it starts after): wait until the
    process TFMW_MATRIX_RUN names has ended, at most DEADLINE_SECONDS."""
    pid = os.environ.get(VARIABLE)
    if not pid or hasattr(config, "workerinput"):
        return
    started = time.monotonic()
    if running(int(pid)):
        print(f"waiting for the support matrix's oldest row (process {pid}) to end", flush=True)
    while running(int(pid)):
        if time.monotonic() - started > DEADLINE_SECONDS:
            print(f"the oldest row still runs after {DEADLINE_SECONDS} s: the suite starts")
            return
        time.sleep(1)


def running(pid: int) -> bool:
    """The process exists and has not ended (an ended one not yet reaped is a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            state = stat.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"
