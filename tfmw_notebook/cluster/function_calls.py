"""`cluster.run(fn, *args, **kwargs)`: a function run on every worker as a cell.

The function and its arguments are pushed to every worker under names of their own,
then a one-line cell calls it: so a function gets all a cell gets (the strategy's
scope, the Keras hooks, the failure watch, and a replay after a restart, which
pushes them again before the cell runs again), and the chief's return value is
pulled back afterwards. As with ipyparallel's `apply`, the function's global names
are looked up in the workers' namespace (`tf`, `strategy`, `tfdist`, what earlier
cells defined): a script's own imports are not there.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from ipyparallel.serialize import serialize_object

from ..errors import BadArgument, remote_summary
from .cells.cell_syntax import CellSource, checked_source
from .cells.run_settings import RunSettings


class FunctionRunner(Protocol):
    """What a function's run needs of the cluster (TFCluster has it)."""

    def _require_workers(self) -> None: ...
    def push(self, namespace: dict[str, Any]) -> None: ...
    def pull(self, names: list[str], rank: int = 0) -> dict[str, Any]: ...
    def _run_cell(self, cell: CellSource, settings: RunSettings) -> Any: ...

RESULT_NAME = "_tfdist_result"
_numbers = itertools.count(1)


@dataclass(frozen=True)
class FunctionCall:
    """What to push to the workers and the cell that calls the function there."""

    pushed: dict[str, Any]
    source: str


def function_call(fn: Callable, args: tuple, kwargs: dict) -> FunctionCall:
    """The push and the cell for calling `fn(*args, **kwargs)` on every worker."""
    if not callable(fn):
        raise BadArgument(f"Invalid value for argument `source`. Received: source={fn!r}. "
                          "Expected the cell's code as a string, or a function")
    n = next(_numbers)
    names = (f"_tfdist_fn_{n}", f"_tfdist_args_{n}", f"_tfdist_kwargs_{n}")
    return FunctionCall(dict(zip(names, (fn, tuple(args), dict(kwargs)))),
                        f"{RESULT_NAME} = {names[0]}(*{names[1]}, **{names[2]})\n")


def unsendable(exc: BaseException, what: str) -> BadArgument:
    """A function, argument or return value that cannot travel between processes."""
    return BadArgument(f"{what} cannot be sent between this process and the workers "
                       f"({remote_summary(exc)}): send plain data (numbers, arrays, "
                       "history.history, weights) and build the rest in the function")


def is_serialization_error(exc: BaseException) -> bool:
    """Whether `exc` (maybe a worker's, as a RemoteError) says a value could not be pickled."""
    name = getattr(exc, "ename", "") or type(exc).__name__
    text = str(getattr(exc, "evalue", "") or exc).lower()
    return name in ("PicklingError", "TypeError", "AttributeError") or "pickl" in text


def run_function(cluster: FunctionRunner, fn: Callable, args: tuple, kwargs: dict,
                 settings: RunSettings) -> Any:
    """`cluster.run(fn, *args, **kwargs)`: the chief's return value."""
    cluster._require_workers()
    call = function_call(fn, args, kwargs)
    try:
        serialize_object(call.pushed)
    except Exception as exc:
        raise unsendable(exc, f"{_name_of(fn)} or its arguments") from None
    cluster.push(call.pushed)
    cluster._run_cell(checked_source(call.source), replace(settings, want_display=False))
    try:
        return cluster.pull([RESULT_NAME])[RESULT_NAME]
    except Exception as exc:
        if not is_serialization_error(exc):
            raise
        raise unsendable(exc, f"what {_name_of(fn)} returned on the chief") from None


def _name_of(fn: Callable) -> str:
    return f"{getattr(fn, '__qualname__', None) or type(fn).__name__}()"
