"""Run one notebook cell's source on this worker, inside the shared strategy's scope."""

from __future__ import annotations

import ast
import contextlib
import linecache
import sys
from typing import Any

from ...protocol.run_options import CellOptions, FitState
from ..common import guarded_patches, identity, shared_strategy
from ..corrections import loop_batches
from ..corrections.other_strategy_scope import RunnerScope
from ..fits import keras_hooks, preemption
from ..liveness import controller_watch
from ..liveness.heartbeat import Heartbeat, engine_publish
from ..writes import background_writes, chief_writes, shared_directories
from . import output_sent


def _register_source(source: str, filename: str) -> None:
    # Lets tracebacks quote the cell's own lines.
    lines = source.splitlines(keepends=True)
    linecache.cache[filename] = (len(source), None, lines, filename)


def _parsed(shell, source: str, filename: str) -> tuple[ast.Module, ast.Expression | None]:
    """The cell's statements, and its last expression apart (its value is displayed)."""
    code = shell.transform_cell(source)
    _register_source(code, filename)
    tree = ast.parse(code, filename=filename)
    last_expr = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last_expr = ast.Expression(tree.body.pop().value)
    return tree, last_expr


def run_cell(source: str, filename: str, display_rank: int | None, options: CellOptions,
             state: FitState, scope: bool = True) -> dict[str, Any]:
    """Execute `source` in the engine's user namespace.

    Returns {"display": ..., "fits": ..., "runs": ...}: the last expression's display
    data (a mime bundle of strings, which always travels back, unlike the value itself)
    on the worker of rank `display_rank` (every worker gets the same arguments: the
    notebook sends a cell once), what each fit() of the cell ended with, and the
    chief's run record of each fit (keras_run_record.py; none on the other workers):
    exceptions propagate, for the client to notice a failed rank.
    `options` say what the cell's Keras fit/evaluate calls get (reporting,
    checkpoints, backups, a checkpoint to resume from), `state` what they keep
    or give back of their end state: see keras_hooks. With `scope` False the cell
    runs outside the shared strategy's scope (`%%tfdist --no-scope`).
    """
    from IPython import get_ipython

    shell = get_ipython()
    tree, last_expr = _parsed(shell, source, filename)
    keras_hooks.configure(options, state)
    namespace = shell.user_ns
    # Steps aside for a scope of another strategy the cell enters (other_strategy_scope.py).
    in_scope = RunnerScope(shared_strategy.shared_strategy()) if scope else contextlib.nullcontext()
    publish = engine_publish()
    background_writes.tell_with(publish)
    try:
        with (Heartbeat(publish, check=controller_watch.check), in_scope,
              shared_directories.during_cell(), loop_batches.during_cell()):
            exec(compile(tree, filename, "exec"), namespace)
            value = eval(compile(last_expr, filename, "eval"), namespace) if last_expr else None
            background_writes.wait()   # its checkpoints written (a failed write fails it)
    except BaseException:
        background_writes.wait_after_error()
        raise
    finally:
        _after_cell()
    return _outcome(shell, namespace, value, display_rank)


def _after_cell() -> None:
    """What every cell's end does, whether it ran through or failed."""
    guarded_patches.emit_report(is_chief=identity.rank() == 0)  # skipped fixes
    preempted = preemption.cell_ended()   # a SIGTERM after a fit's last agreed step
    if preempted:
        print(preempted, file=sys.stderr)
    background_writes.tell_with(None)
    chief_writes.cleanup()   # the other workers' copies of what the cell saved
    output_sent.wait_for_output_sent()
    controller_watch.watch_on_after_cell()   # a controller lost during the cell


def _outcome(shell, namespace: dict, value: Any, display_rank: int | None) -> dict[str, Any]:
    """What run_cell returns (see there); a last value other than None also becomes `_`
    in the cell's `namespace`, as in IPython."""
    outcome: dict[str, Any] = {"display": None, "fits": keras_hooks.fit_records(),
                               "runs": keras_hooks.run_records()}
    if value is None:
        return outcome
    namespace["_"] = value
    if display_rank == identity.rank():
        data, metadata = shell.display_formatter.format(value)
        outcome["display"] = {"data": data, "metadata": metadata}
    return outcome


def missing_names(names: list[str]) -> list[str]:
    """Names not defined in this worker's namespace (for --out)."""
    from IPython import get_ipython

    namespace = get_ipython().user_ns
    return [name for name in names if name not in namespace]


def missing_magics(names: list[str]) -> list[str]:
    """Of '%name' / '%%name', those this worker's IPython does not have."""
    from IPython import get_ipython

    shell = get_ipython()
    missing = []
    for name in names:
        cell = name.startswith("%%")
        found = (shell.find_cell_magic if cell else shell.find_line_magic)(name.lstrip("%"))
        if found is None:
            missing.append(name)
    return missing
