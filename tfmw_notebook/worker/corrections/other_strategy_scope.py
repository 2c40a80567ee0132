"""A cell's `with other_strategy.scope():` works as it does in one process.

A %%tfdist cell runs inside the shared strategy's scope (cell.py). TensorFlow refuses to enter
a second strategy's scope inside it ("Mixing different tf.distribute.Strategy objects"), so
code such as TensorFlow's save-and-load tutorial, which loads a model under
`tf.distribute.OneDeviceStrategy("/cpu:0").scope()` and trains it there, failed on the workers
and works in one process.

The cell runner enters its scope through `RunnerScope`, which knows it is the runner's. The
patched `__enter__` of TensorFlow's scope object (`_CurrentDistributionContext`) makes the
runner's scope step aside for another strategy's scope, which then is the current strategy, as
in one process; its `__exit__` enters a fresh runner's scope again. It steps aside only when
the runner's scope is the innermost of everything it set (strategy, variable creator,
variable scope, device) on the runner's thread and graph, and the cell has not entered the
shared strategy's scope itself (user code or Keras' `fit`): otherwise TensorFlow raises its own
error, as in one process. The other strategy runs on each worker on its own: no collectives.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable
from typing import Any

from ...protocol.warning import TFDistWarning
from ..common import guarded_patches

_MARKS = "_tfmw_scope_marks"    # per scope object: what each of its entries did (a stack)
_PATCHED = "_tfmw_other_strategy_scope"
_HOLD, _ASIDE = "hold", "aside"


class RunnerScope:
    """The shared strategy's scope as the cell runner enters it: it steps aside for another
    strategy's scope (see the module's docstring)."""

    current: RunnerScope | None = None   # the one open now (cells run one at a time)

    def __init__(self, strategy: Any):
        self.strategy = strategy
        self.context: Any = None         # TensorFlow's scope object while in force
        self.holds = 0                   # the cell's own entries of the shared scope, open
        self._innermost: tuple = ()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Any:
        self._thread = threading.current_thread()
        self.come_back()
        RunnerScope.current = self
        return self.strategy

    def __exit__(self, *exc_info: Any) -> None:
        RunnerScope.current = None
        context, self.context = self.context, None
        if context is not None:
            context.__exit__(*exc_info)

    def come_back(self) -> None:
        """Enter the shared strategy's scope (again: a scope object is entered once)."""
        if self.context is not None:
            return
        self.context = self.strategy.scope()
        self.context.__enter__()
        self._innermost = _innermost_state()

    def come_back_if_open(self) -> None:
        """After another strategy's scope: back, unless the cell ended meanwhile."""
        if RunnerScope.current is self:
            self.come_back()

    def step_aside(self) -> None:
        context, self.context = self.context, None
        context.__exit__(None, None, None)

    def on_top(self) -> bool:
        """The runner's scope is the innermost strategy scope of this thread."""
        from tensorflow.python.distribute import distribute_lib

        return (self.context is not None
                and distribute_lib._get_per_thread_mode() is self.context._context)

    def may_step_aside(self) -> bool:
        return (self.context is not None and self.holds == 0
                and threading.current_thread() is self._thread
                and _innermost_state() == self._innermost)


def _innermost_state() -> tuple:
    """What a scope set, compared by identity: any scope entered since changes one of them."""
    from tensorflow.python.eager import context
    from tensorflow.python.framework import ops
    from tensorflow.python.ops import variable_scope

    graph = ops.get_default_graph()
    return tuple(map(id, (graph, *graph._distribution_strategy_stack,
                          graph._variable_creator_stack, context.context().device_spec,
                          variable_scope.get_variable_scope())))


def install() -> bool:
    """Patch TensorFlow's scope object; False if this TensorFlow has none or another shape
    (nothing changes, and the cell runner says so)."""
    return guarded_patches.patch(
        "other_strategy_scope", "tensorflow.python.distribute.distribute_lib."
        "_CurrentDistributionContext.__enter__", _scope_class, _step_aside_for_others,
        library="tensorflow",
        risk="a cell's `with other_strategy.scope():` fails on the workers ('Mixing "
             "different tf.distribute.Strategy objects'); `%%tfdist --no-scope` avoids it")


def _scope_class() -> Any:
    from tensorflow.python.distribute import distribute_lib

    # What RunnerScope and _innermost_state read, checked now rather than in a cell.
    for name in ("_get_per_thread_mode", "_get_default_strategy"):
        guarded_patches.attribute(distribute_lib, name)
    _innermost_state()
    scope_class = guarded_patches.attribute(distribute_lib, "_CurrentDistributionContext")
    guarded_patches.method(scope_class, "__enter__")
    guarded_patches.method(scope_class, "__exit__")
    return scope_class


def _step_aside_for_others(scope_class: Any) -> None:
    if getattr(scope_class, _PATCHED, False):
        return
    original_enter, original_exit = scope_class.__enter__, scope_class.__exit__

    def __enter__(self):
        return _enter(self, original_enter)

    def __exit__(self, *exc_info):
        return _exit(self, original_exit, exc_info)

    scope_class.__enter__, scope_class.__exit__ = __enter__, __exit__
    setattr(scope_class, _PATCHED, True)


def _enter(scope: Any, original_enter: Callable[[Any], Any]) -> Any:
    """Enter TensorFlow's scope object `scope`, the runner's scope stepping aside if due."""
    runner, mark = RunnerScope.current, None
    if runner is not None and scope is not runner.context:
        mark = _entry_kind(runner, scope._context.strategy)
    if runner is not None and mark == _ASIDE:
        _warn_if_mirrored(scope._context.strategy)
        runner.step_aside()
        try:
            result = original_enter(scope)
        except BaseException:
            runner.come_back()
            raise
    else:
        result = original_enter(scope)
    if runner is not None and mark == _HOLD:
        runner.holds += 1
    scope.__dict__.setdefault(_MARKS, []).append((mark, runner))
    return result


def _exit(scope: Any, original_exit: Callable[..., Any], exc_info: tuple) -> Any:
    """Exit `scope`; the runner's scope comes back if it stepped aside for it."""
    mark, runner = (scope.__dict__.get(_MARKS) or [(None, None)]).pop()
    try:
        return original_exit(scope, *exc_info)
    finally:
        if mark == _HOLD:
            runner.holds -= 1
        elif mark == _ASIDE:
            runner.come_back_if_open()


def trains_apart(model: Any) -> bool:
    """The Keras model was built under another strategy than the shared one (and not outside
    any strategy): its fit/evaluate run on this worker alone, so the package's extras, which
    synchronise the workers (checkpoints, backups) or report a cluster's fit, stay off."""
    from tensorflow.python.distribute import distribute_lib

    strategy = getattr(model, "distribute_strategy", None)
    shared = RunnerScope.current.strategy if RunnerScope.current else _shared_strategy()
    return strategy not in (None, shared, distribute_lib._get_default_strategy())


def _shared_strategy() -> Any:
    from ..common import shared_strategy

    return shared_strategy.shared_strategy()


def _entry_kind(runner: RunnerScope, strategy: Any) -> str | None:
    """_HOLD: the cell enters the shared scope itself; _ASIDE: the runner's scope steps aside
    for another strategy's; None: TensorFlow decides alone."""
    if strategy is runner.strategy:
        return _HOLD if runner.on_top() else None
    return _ASIDE if runner.may_step_aside() else None


def _warn_if_mirrored(strategy: Any) -> None:
    # MirroredStrategy is TensorFlow's one-machine strategy: here it trains each worker on its
    # own, which code written for it does not expect to be told.
    if type(strategy).__name__ == "MirroredStrategy":
        warnings.warn(
            "tfmw_notebook: MirroredStrategy's scope trains each worker on its own devices, "
            "without the other workers; use `strategy` (the cluster's "
            "MultiWorkerMirroredStrategy) to train on all of them.",
            TFDistWarning,
            stacklevel=3,
        )
