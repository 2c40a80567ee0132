"""The engine process `%tfdist start` launches: ipyparallel's engine, with TensorFlow's
import begun first.

TensorFlow takes seconds to import. Begun at the process's start (worker/boot/preimport.py,
a background thread), it overlaps the engine's own imports and its registration with
the controller, instead of starting after them (an engine's startup command only runs
once it has registered).
"""

from __future__ import annotations

from ...protocol import orphan_guard
from . import preimport  # noqa: F401  (starts the import)
from .kernel_imports import import_kernel_without_debugger

# Before anything slow: a kernel killed while this engine starts must end it too.
orphan_guard.start()


def run() -> None:
    """Be the engine: ipyparallel's engine app, on this process's argv."""
    import_kernel_without_debugger()

    from ipyparallel.engine.app import main

    main()


if __name__ == "__main__":
    run()
