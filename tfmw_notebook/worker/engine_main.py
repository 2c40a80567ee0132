"""The engine process `%tfdist start` launches: ipyparallel's engine, with TensorFlow's
import begun first.

TensorFlow takes seconds to import. Begun at the process's start (worker/preimport.py,
a background thread), it overlaps the engine's own imports and its registration with
the controller, instead of starting after them (an engine's startup command only runs
once it has registered).
"""

import sys

from . import preimport  # noqa: F401  (starts the import)


def import_kernel_without_debugger() -> None:
    """Import ipykernel with its debugger switched off.

    No front end can attach Jupyter's debugger to an ipyparallel engine, yet ipykernel
    imports debugpy (and pydevd) to offer it, during the start-up every worker waits on:
    without it TFCluster.start(2) took 2.44 s instead of 2.62 s (medians, benchmarks/README).
    debugpy is hidden only while ipykernel looks for it, so a cell can still import it.
    """
    hidden = "debugpy" not in sys.modules
    if hidden:
        sys.modules["debugpy"] = None   # makes `import debugpy...` raise ImportError
    try:
        import ipykernel.debugger  # noqa: F401  (records that debugpy is unavailable)
    finally:
        if hidden and sys.modules.get("debugpy", 0) is None:
            del sys.modules["debugpy"]


if __name__ == "__main__":
    import_kernel_without_debugger()

    from ipyparallel.engine.app import main

    main()
