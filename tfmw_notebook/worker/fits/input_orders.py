"""A pipeline shared by several fits gets back its shuffle orders after a restart.

A shuffle that reshuffles each iteration (tf.data's default) draws new seeds from a
generator its dataset holds each time an iterator of it is made, and each time a
`repeat()` above it begins a repetition (measured: a tf-keras fit of 6 epochs of 16
batches on `shuffle(1024, seed=0).batch(64).repeat()` drew 7 times with one iterator;
3 epochs of the same pipeline without `repeat()` drew 4 times, Keras 3 6 times). A pipeline
defined in one cell and fitted in several therefore gives its k-th fit other orders than
its first. A restart re-creates the pipeline with its generator at its start, and a
replayed fit restores its state without iterating it (fit_state.replay_fit), so the fit
resumed after it read its input in the first fit's orders: it ended with other weights.

TensorFlow does not expose the generator's count (an iterator's saved state holds it,
with the shuffle buffer: 18-50 s and 16 MB for a 60000-row buffer), so each fit counts
what drew: the iterators made over each of its tf.data arguments (`x`,
`validation_data`, counted where tf.data and tf.distribute make them, through
guarded_patches.py), with the batches its training steps read. A replayed fit makes the
same iterators over the replayed cell's pipeline and, on a repeated one, reads its steps'
batches again from the last (the repetitions they began draw as they drew), as a resumed
fit's own input is put back (input_position.py). The resume line says what was drawn
again, and what could not be (`take_report()`).
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..common import guarded_patches
from .optimizer_steps import optimizer_steps

KEY = "tfmw_input_orders"   # where a fit's record keeps its counts (its History's params)
_LONGEST = 64               # datasets looked at above an iterated one


@dataclass
class _Watch:
    datasets: dict[str, Any]                      # argument name -> its tf.data pipeline
    iterators: dict[str, int] = field(default_factory=dict)

    def saw(self, iterated: Any) -> None:
        """An iterator was made over `iterated`: count it for every watched pipeline it
        reads from."""
        above = _above(iterated)
        for name, dataset in self.datasets.items():
            if id(dataset) in above:
                self.iterators[name] = self.iterators.get(name, 0) + 1


@dataclass
class GivenBack:
    """What the replayed fits of this worker gave back, for the resume line."""

    iterators: int = 0
    batches: int = 0
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)


_watch: _Watch | None = None
_last: dict[str, dict[str, Any]] = {}
_local = threading.local()   # an iterator made while another is being made is not counted
given_back = GivenBack()


def install() -> None:
    """Count the iterators made over tf.data pipelines and tf.distribute's datasets."""
    for module, owner in (("tensorflow.python.data.ops.dataset_ops", "DatasetV2"),
                          ("tensorflow.python.distribute.input_lib", "DistributedDataset")):
        guarded_patches.patch(
            f"input_orders.count_{owner}", f"{module}.{owner}.__iter__",
            functools.partial(_iter_method, module, owner), _count_iterators,
            library="tensorflow",
            risk="a pipeline shared by several fits is read in other shuffle orders by a "
                 "fit resumed after a restart")


def _iter_method(module_name: str, owner: str):
    import importlib

    cls = guarded_patches.attribute(importlib.import_module(module_name), owner)
    guarded_patches.method(cls, "__iter__")
    return cls


def _count_iterators(cls) -> None:
    original = cls.__iter__
    if getattr(original, "_tfmw_counted", False):
        return

    def __iter__(self):
        if _watch is None or getattr(_local, "inside", False):
            return original(self)
        _watch.saw(self)
        _local.inside = True
        try:
            return original(self)
        finally:
            _local.inside = False

    __iter__._tfmw_counted = True   # type: ignore[attr-defined]
    cls.__iter__ = __iter__


@contextlib.contextmanager
def counting(model: Any, arguments: dict[str, Any]) -> Iterator[None]:
    """Around an outermost fit() of `model`: count the iterators made over each of its
    `arguments` that reshuffles, and the batches its training steps read (its optimizer's
    steps); `last_counts()` gives them after."""
    global _watch, _last
    watched = {name: data for name, data in arguments.items() if reshuffles(data)}
    _watch = _Watch(watched) if watched else None
    _last = {}
    began = optimizer_steps(model)
    try:
        yield
    finally:
        if _watch is not None:
            _last = {name: {"iterators": _watch.iterators.get(name, 0),
                            "repeats": _repeats(data)}
                     for name, data in _watch.datasets.items()}
            if "x" in _last:
                _last["x"]["batches"] = max(0, optimizer_steps(model) - began)
        _watch = None


def last_counts() -> dict[str, dict[str, Any]]:
    """The counts of the fit that just ended (empty: none of its inputs reshuffles)."""
    return {name: dict(count) for name, count in _last.items()}


def give_back(arguments: dict[str, Any], counts: dict[str, dict[str, Any]]) -> None:
    """A replayed fit: draw from its pipelines' seed generators what the fit drew (a
    pipeline read to its end drew all its repetitions: that ends the reading quietly)."""
    began = time.perf_counter()
    for name, count in counts.items():
        data = arguments.get(name)
        if not reshuffles(data):
            given_back.problems.append(
                f"the fit's `{name}` in the replayed cell is not the shuffled pipeline it "
                f"was, so the orders it drew from were not drawn again")
            continue
        if name != "x" and count.get("repeats"):
            given_back.problems.append(
                f"a repeated `{name}` pipeline's orders are not counted")
        _draw_again(data, int(count.get("iterators", 0)),
                    int(count.get("batches", 0)) if count.get("repeats") else 0)
    given_back.seconds += time.perf_counter() - began


def _draw_again(data: Any, iterators: int, batches: int) -> None:
    """Make `iterators` iterators over `data`, the last read for `batches` batches and
    one more: the fit's iterator read one ahead (tf.data prefetches), which begins the
    next repetition when its batches ended one (measured: 7 draws for 6 repetitions)."""
    data = _without_autotuned_prefetch(data)
    for made in range(1, iterators + 1):
        iterator = iter(data)
        given_back.iterators += 1
        if made == iterators and batches:
            _read(iterator, batches + 1)


def _read(iterator: Any, batches: int) -> None:
    for _ in range(batches):
        try:
            next(iterator)
        except (StopIteration, LookupError):   # it ended: its repetitions are all begun
            return
        given_back.batches += 1


def _without_autotuned_prefetch(data: Any) -> Any:
    """`data` (its seed generators shared) without the prefetch tf.data adds and tunes: in
    a loop that only reads, it read ahead further than the fit had (over the next
    repetition's start: 5 draws where the fit drew 4, in 2 of 6 runs)."""
    import tensorflow as tf

    options = tf.data.Options()
    options.autotune.enabled = False
    options.experimental_optimization.inject_prefetch = False
    return data.with_options(options)


def take_report() -> tuple[str, str]:
    """For the resume line, once: what the replayed fits drew again ("" when nothing), and
    why the shuffle orders after the resume may not be the undisturbed ones ("")."""
    global given_back
    report, given_back = given_back, GivenBack()
    done = (f"; {report.iterators} iterators made and {report.batches} batches read for "
            f"the shuffle orders of the fits before it in {report.seconds:.1f} s"
            if report.iterators else "")
    return done, "; ".join(dict.fromkeys(report.problems))


def reshuffles(data: Any) -> bool:
    """Whether `data` is a tf.data pipeline with a shuffle that reshuffles each iteration."""
    if not type(data).__module__.startswith("tensorflow.python.data"):
        return False
    return any(getattr(node, "_reshuffle_each_iteration", False) is True
               for node in _chain(data))


def _repeats(data: Any) -> bool:
    """Whether `data` may not end with an epoch (a `repeat()`; a length not known): its
    repetitions draw as its reading begins them."""
    try:
        return int(data.cardinality()) < 0   # INFINITE (-1) or UNKNOWN (-2)
    except Exception:
        return True


def _chain(data: Any) -> list[Any]:
    """`data` and the datasets it reads from, nearest first."""
    seen: list[Any] = []
    queue = [data]
    while queue and len(seen) < _LONGEST:
        node = queue.pop(0)
        if node is None or any(node is s for s in seen):
            continue
        seen.append(node)
        for name in ("_input_dataset", "_original_dataset", "_dataset"):
            queue.append(getattr(node, name, None))
        queue.extend(getattr(node, "_input_datasets", None) or ())
    return seen


def _above(iterated: Any) -> set[int]:
    return {id(node) for node in _chain(iterated)}
