"""What `%tfdist diagnose` concludes from the workers' timings (pure).

Each worker measured (worker/fits/diagnose.py), in seconds: its training step, the
step's communication (the gradient all-reduce plus the step's other collectives),
reading one batch, the local step (forward, backward, update) with every worker
computing at once and alone, and (Keras 3) the framework's own work around each step.
The verdict names the largest part of the step:

    communication-bound  the all-reduce: larger batches per worker amortize it
    input-bound          reading batches: the tf.data pipeline is the limit
    compute-bound        the model's own work: the good case, unless the workers slow
                         each other down (they share the host's cores)
    framework-bound      Keras 3's work around each step (Python, its loop, the check
                         for a next batch): several steps per call amortize it

Scaling efficiency is the cluster's examples/s against N x one worker's alone:
(N x batch / step) / (N x batch / alone) = alone / step.
"""

from __future__ import annotations

import base64
import html
import statistics
from dataclasses import dataclass

PARTS = ("input", "compute", "communication", "framework")
# The batch a communication-bound verdict suggests: this many times the current one.
BATCH_FACTOR = 4
# Computing next to the others this much slower than alone: the workers contend.
CONTENTION = 1.25
SCALING_WELL = 0.8


@dataclass(frozen=True)
class WorkerTimings:
    """One worker's measurements, seconds per step (see worker/fits/diagnose.py)."""

    rank: int
    step: float
    communication: float
    input: float
    compute: float
    alone: float
    batch: int
    gradient_bytes: int
    collectives: int = 1
    framework: float = 0.0   # Keras 3 only: its work around each step

    @classmethod
    def from_worker(cls, rank: int, measured: dict) -> WorkerTimings:
        return cls(rank=rank, step=measured["step"], communication=measured["communication"],
                   input=measured["input"], compute=measured["compute"],
                   alone=measured["alone"], batch=measured["batch"],
                   gradient_bytes=measured["gradient_bytes"],
                   collectives=measured.get("collectives", 1),
                   framework=measured.get("framework", 0.0))

    @property
    def parts_total(self) -> float:
        return self.input + self.compute + self.communication + self.framework


@dataclass(frozen=True)
class Diagnosis:
    workers: tuple[WorkerTimings, ...]

    @property
    def size(self) -> int:
        return len(self.workers)

    def median(self, name: str) -> float:
        return statistics.median(getattr(w, name) for w in self.workers)

    def share(self, part: str) -> float:
        """The part's fraction of the measured step (medians over the workers)."""
        return self.median(part) / self.median("step")

    @property
    def bound(self) -> str:
        """'communication', 'input', 'compute' or 'framework': the step's largest part."""
        return max(PARTS, key=self.median)

    @property
    def efficiency(self) -> float:
        """Examples/s of the cluster against N x one worker's alone."""
        return self.median("alone") / self.median("step")

    @property
    def contention(self) -> float:
        """How much slower the workers compute together than alone."""
        return self.median("compute") / self.median("alone")

    def verdict(self) -> str:
        step_ms = self.median("step") * 1000
        batch = int(self.median("batch"))
        if self.bound == "communication":
            bigger = _share_with_batch(self, BATCH_FACTOR)
            return (f"communication-bound: all-reduce is {self.share('communication'):.0%} of "
                    f"each step ({step_ms:.1f} ms); a per-worker batch of "
                    f"{batch * BATCH_FACTOR} instead of {batch} would cut it to "
                    f"~{bigger:.0%}")
        if self.bound == "input":
            return (f"input-bound: reading a batch is {self.share('input'):.0%} of each step "
                    f"({step_ms:.1f} ms); give the tf.data pipeline more: .cache(), "
                    ".prefetch(tf.data.AUTOTUNE), map(..., num_parallel_calls=tf.data.AUTOTUNE)")
        if self.bound == "framework":
            return (f"framework-bound: Keras' own work around each step is "
                    f"{self.share('framework'):.0%} of it ({step_ms:.1f} ms); run several "
                    "steps per call: model.compile(..., steps_per_execution=8)")
        head = f"compute-bound: computation is {self.share('compute'):.0%} of each step"
        if self.efficiency >= SCALING_WELL:
            return f"{head}; scaling well ({self.efficiency:.0%} of {self.size} x one worker)"
        if self.contention >= CONTENTION:
            return (f"{head}, but each worker computes {self.contention:.1f}x slower next to "
                    f"the others than alone (they share this host's cores): scaling "
                    f"efficiency {self.efficiency:.0%}; more workers per host will not help")
        return f"{head}; scaling efficiency {self.efficiency:.0%}"

    def lines(self) -> list[str]:
        """A text table, a row per worker, milliseconds."""
        framework = any(w.framework for w in self.workers)
        rows = [f"{'worker':>6} {'step':>8} {'input':>8} {'compute':>8} {'all-reduce':>10} "
                + (f"{'framework':>9} " if framework else "")
                + f"{'alone':>8}  (ms per step; batch {int(self.median('batch'))} per worker, "
                f"gradients {_size(self.median('gradient_bytes'))})"]
        for w in self.workers:
            rows.append(f"{w.rank:>6} {w.step * 1e3:>8.2f} {w.input * 1e3:>8.2f} "
                        f"{w.compute * 1e3:>8.2f} {w.communication * 1e3:>10.2f} "
                        + (f"{w.framework * 1e3:>9.2f} " if framework else "")
                        + f"{w.alone * 1e3:>8.2f}")
        return rows

    def __str__(self) -> str:
        return "\n".join(self.lines() + [self.verdict(),
                                         f"scaling efficiency: {self.efficiency:.0%} "
                                         f"(global examples/s against {self.size} x one "
                                         "worker's alone)"])

    def _repr_mimebundle_(self, include=None, exclude=None):
        from ..widgets.diagnosis_chart import render_diagnosis_png, shown_width

        png = render_diagnosis_png(self)
        encoded = base64.b64encode(png).decode("ascii")
        page = (f'<img src="data:image/png;base64,{encoded}" width="{shown_width(png)}" '
                f'alt="step-time breakdown per worker"><pre>{html.escape(str(self))}</pre>')
        return {"text/plain": str(self), "text/html": page}, {}


def _size(size: float) -> str:
    return f"{size / 1e6:.2f} MB" if size >= 1e5 else f"{size / 1e3:.1f} kB"


def _share_with_batch(diagnosis: Diagnosis, factor: int) -> float:
    """The all-reduce's share of a step with `factor` times the batch: input and
    compute grow with the batch, the all-reduce does not."""
    growing = diagnosis.median("input") + diagnosis.median("compute")
    step = diagnosis.median("step") + growing * (factor - 1)
    return diagnosis.median("communication") / step
