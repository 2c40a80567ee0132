"""Corrections to TensorFlow's, Keras' and trackers' internals that degrade, never break.

The workers correct third-party code in place (a class's method, a module's function, a flag)
so that code written for one process runs under the shared MultiWorkerMirroredStrategy. The
internals they patch change between releases: keras-nightly 3.16 renamed the class two Keras 3
corrections patch (DESIGN fact 30), and the correction that looked it up raised inside the
user's `import keras`, so no cell could even import Keras. Every patch goes through `patch()`:
it looks its target up, checks the target still has the shape the correction was written for
(`method()`: the parameters it passes on), and applies it. A target that is missing or changed,
or a correction that raises, is skipped and recorded with what may then fail; nothing reaches
the code that triggered it (an import, the worker's start). What was applied stays applied.

The cell runner reports the skips once: `take_report()` gives one line naming each correction
skipped since the last report, the library versions it met and what may fail.
"""

from __future__ import annotations

import inspect
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO, TypeVar

from . import package_versions

T = TypeVar("T")


class TargetChanged(LookupError):
    """The target exists but not in the shape the correction was written for."""


@dataclass(frozen=True)
class Skip:
    """One correction not applied, and why."""

    correction: str     # e.g. "keras3_corrections.build_from_local_batch"
    target: str         # what it patches, e.g. "keras...trainer.TensorFlowTrainer._symbolic_build"
    reason: str         # the lookup's or the correction's exception, one line
    risk: str           # what may then fail under the shared strategy
    library: str        # the module whose version the line names: "keras", "tf_keras", ...
    on_chief: bool = True   # False: a correction made on the other workers only

    def describe(self) -> str:
        return f"{self.correction} ({self.target}: {self.reason}), so {self.risk}"


_lock = threading.Lock()
_skips: list[Skip] = []        # every skip so far (a correction is skipped once: it is not retried)
_unreported: list[Skip] = []   # those take_report() has not given yet


def patch(correction: str, target: str, lookup: Callable[[], T], apply: Callable[[T], Any], *,
          risk: str, library: str, on_chief: bool = True) -> bool:
    """Apply one correction: `apply(lookup())`. True when it ran; False when it was skipped.

    `lookup()` finds what the correction patches and raises (AttributeError, ImportError,
    KeyError, TargetChanged ...) when that is missing or changed; `apply(found)` patches it.
    Any exception from either is recorded as a skip of `correction` (its `target`, the reason,
    the `risk` of going without it, the `library` whose version the report names) and not
    raised. `on_chief` False marks a correction the chief does not make (see take_report).
    """
    try:
        found = lookup()
    except Exception as exc:
        return _skipped(correction, target, exc, risk, library, on_chief)
    try:
        apply(found)
    except Exception as exc:
        return _skipped(correction, target, exc, risk, library, on_chief)
    return True


def attribute(owner: Any, name: str) -> Any:
    """`owner.name` as `owner` defines or inherits it; AttributeError naming both if absent."""
    try:
        return getattr(owner, name)
    except AttributeError:
        raise AttributeError(f"{_name_of(owner)} has no attribute {name!r}") from None


def method(owner: Any, name: str, *parameters: str) -> Callable[..., Any]:
    """`owner.name`, checked to take `parameters` by name (those a correction passes on or
    reads); TargetChanged when it does not. A `**kwargs` parameter takes any name."""
    function = attribute(owner, name)
    if not callable(function):
        raise TargetChanged(f"{_name_of(owner)}.{name} is not callable")
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return function          # a builtin without a signature: nothing to compare
    accepted = signature.parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in accepted.values()):
        return function
    missing = [p for p in parameters if p not in accepted]
    if missing:
        raise TargetChanged(f"{_name_of(owner)}.{name}{signature} takes no "
                            f"{', '.join(missing)}")
    return function


def _name_of(owner: Any) -> str:
    name = getattr(owner, "__qualname__", None) or getattr(owner, "__name__", None)
    return name if isinstance(name, str) else repr(owner)


def _skipped(correction: str, target: str, exc: Exception, risk: str, library: str,
             on_chief: bool) -> bool:
    text = " ".join(str(exc).split()) or "no message"
    skip = Skip(correction, target, f"{type(exc).__name__}: {text}", risk, library, on_chief)
    with _lock:
        _skips.append(skip)
        _unreported.append(skip)
    return False


def skipped() -> list[Skip]:
    """Every correction skipped in this process so far."""
    with _lock:
        return list(_skips)


def take_report(*, is_chief: bool = True) -> str | None:
    """One line for the skips not reported yet (None if there are none), then forgets them.

    Called by the cell runner once per cell run on every worker. The workers run one
    environment, so the chief names every skip and the others only the skips of corrections
    the chief does not make: the notebook shows one line, not one per worker.
    """
    with _lock:
        taken, _unreported[:] = list(_unreported), []
    shown = [skip for skip in taken if is_chief or not skip.on_chief]
    return report_line(shown) if shown else None


def emit_report(*, is_chief: bool, stream: TextIO | None = None) -> str | None:
    """Write take_report()'s line, if any, to `stream` (the cell's stderr); return it."""
    line = take_report(is_chief=is_chief)
    if line:
        print(line, file=stream or sys.stderr, flush=True)
    return line


def report_line(skips: list[Skip]) -> str:
    """'tfmw_notebook: on Keras 3.16.0, TensorFlow 2.23.0 skipped 1 correction for
    multi-worker training: NAME (TARGET: REASON), so RISK. ...' as one line."""
    libraries = dict.fromkeys([*(skip.library for skip in skips), "tensorflow"])
    versions = ", ".join(package_versions.describe(library) for library in libraries)
    count = f"{len(skips)} correction{'s' if len(skips) > 1 else ''}"
    details = "; ".join(skip.describe() for skip in skips)
    return (f"tfmw_notebook: on {versions} skipped {count} for multi-worker training: "
            f"{details}. The versions tested are listed in the docs' Installing page.")
