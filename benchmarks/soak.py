"""Soak: one kernel, many cells and restarts; does anything grow?

    python benchmarks/soak.py [--cells 200] [--restarts 10] [--every 20]

Runs %%tfdist cells in one real kernel on a 2-worker cluster: training, evaluation, a
cell that raises every 10th, an interrupt every 25th, and `--restarts` evenly spaced
`%tfdist restart`s. Every `--every` cells it prints the kernel's RSS, open file
descriptors and threads, the processes under the kernel, the ports they listen on,
and the temp files workers left behind (directories of workers that are gone, and
TensorFlow's autograph modules loose in the temp directory). The test suite runs a
short version (tests/test_soak.py).
"""

from __future__ import annotations

import argparse
import glob
import os
import sys
import tempfile
import threading
import time
from dataclasses import dataclass

import psutil

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

from kernel_session import KernelSession  # noqa: E402 (the tests' kernel driver)

SETUP = '''
import numpy as np
rng = np.random.default_rng(0)
x = rng.normal(size=(512, 8)).astype("float32")
y = (x @ rng.normal(size=(8, 1))).astype("float32")
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Input((8,)), tf.keras.layers.Dense(16),
                                 tf.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
data = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32)
'''
TRAIN = "%%tfdist --no-checkpoint\nmodel.fit(data, epochs=1, steps_per_epoch=5, verbose=0)"
EVALUATE = "%%tfdist --no-checkpoint\nmodel.evaluate(data, steps=3, verbose=0)"
RAISE = "%%tfdist\nraise ValueError('a mistake, on purpose')"
LONG = ("%%tfdist --no-checkpoint\n"
        "model.fit(data, epochs=1000, steps_per_epoch=50, verbose=0)")


@dataclass
class Sample:
    """One row of the table."""

    cells: int
    restarts: int
    rss_mb: float
    fds: int
    threads: int
    children: int
    ports: int
    stale_worker_dirs: int
    loose_autograph_files: int

    def row(self) -> str:
        return (f"{self.cells:>5} {self.restarts:>8} {self.rss_mb:>8.1f} {self.fds:>5} "
                f"{self.threads:>7} {self.children:>8} {self.ports:>5} "
                f"{self.stale_worker_dirs:>10} {self.loose_autograph_files:>9}")


HEADER = "cells restarts   RSS MB   fds threads children ports stale dirs autograph"


def sample(kernel_pid: int, cells: int, restarts: int, temp: str) -> Sample:
    kernel = psutil.Process(kernel_pid)
    children = kernel.children(recursive=True)
    ports = 0
    for process in [kernel, *children]:
        try:
            ports += sum(1 for c in process.net_connections(kind="inet")
                         if c.status == psutil.CONN_LISTEN)
        except psutil.Error:
            pass
    stale = [d for d in glob.glob(os.path.join(temp, "tfmw-worker-*"))
             if not psutil.pid_exists(int(d.rsplit("-", 1)[1]))]
    loose = glob.glob(os.path.join(temp, "__autograph_generated_file*.py"))
    return Sample(cells, restarts, kernel.memory_info().rss / 1e6, kernel.num_fds(),
                  kernel.num_threads(), len(children), ports, len(stale), len(loose))


class Interrupter:
    """Presses interrupt `after` seconds into a cell, and again every 5 s while the cell
    runs, as a user would; counts the presses."""

    def __init__(self, session: KernelSession, after: float):
        self.presses = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(session, after), daemon=True)
        self._thread.start()

    def _run(self, session: KernelSession, after: float) -> None:
        wait = after
        while not self._done.wait(wait):
            session.interrupt()
            self.presses += 1
            wait = 5.0

    def stop(self) -> None:
        self._done.set()
        self._thread.join(timeout=10)


def soak(cells: int, restarts: int, every: int, cwd: str, report=print,
         temp: str | None = None) -> list[Sample]:
    """Run the soak; returns the samples (one before the first cell, then every `every`).

    `temp`: the kernel's and its workers' temp directory (TMPDIR), the one inspected; a
    directory of its own keeps other programs' temp files out of the counts."""
    temp = temp or tempfile.gettempdir()
    session = KernelSession(cwd=cwd, env={"TMPDIR": temp})
    samples = []
    restart_at = {round((i + 1) * cells / (restarts + 1)) for i in range(restarts)}
    done_restarts = 0
    presses: list[int] = []   # interrupt presses each interrupted cell needed
    try:
        session.ok("%load_ext tfmw_notebook", timeout=60)
        session.ok("%tfdist start -n 2", timeout=180)
        session.ok("%%tfdist\n" + SETUP, timeout=120)
        session.ok(TRAIN, timeout=120)   # warm: the first fit traces
        pid = session.kernel_pid()
        samples.append(sample(pid, 0, 0, temp))
        report(HEADER)
        report(samples[-1].row())
        for cell in range(1, cells + 1):
            if cell in restart_at:
                session.ok("%tfdist restart", timeout=180)
                session.ok("%%tfdist\n" + SETUP, timeout=120)
                done_restarts += 1
            if cell % 25 == 0:
                presser = Interrupter(session, 3.0)
                try:
                    out = session.execute(LONG, timeout=180)
                finally:
                    presser.stop()
                assert out.status == "error", "the interrupt should have stopped the fit"
                presses.append(presser.presses)
            elif cell % 10 == 0:
                out = session.execute(RAISE, timeout=120)
                assert out.status == "error"
            elif cell % 3 == 0:
                session.ok(EVALUATE, timeout=120)
            else:
                session.ok(TRAIN, timeout=120)
            if cell % every == 0 or cell == cells:
                samples.append(sample(pid, cell, done_restarts, temp))
                report(samples[-1].row())
        session.execute("%tfdist stop", timeout=60)
        report(f"interrupt presses per interrupted cell: {presses}")
    finally:
        session.shutdown()
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=200)
    parser.add_argument("--restarts", type=int, default=10)
    parser.add_argument("--every", type=int, default=20)
    args = parser.parse_args()
    began = time.perf_counter()
    samples = soak(args.cells, args.restarts, args.every, cwd=tempfile.mkdtemp(prefix="soak-"))
    first, last = samples[0], samples[-1]
    print(f"\n{args.cells} cells, {args.restarts} restarts in {time.perf_counter() - began:.0f} s;"
          f" RSS {first.rss_mb:.0f} -> {last.rss_mb:.0f} MB, fds {first.fds} -> {last.fds}, "
          f"threads {first.threads} -> {last.threads}, children {first.children} -> "
          f"{last.children}, ports {first.ports} -> {last.ports}")


if __name__ == "__main__":
    main()
