"""The engine process `%tfdist start` launches: ipyparallel's engine, with TensorFlow's
import begun first.

TensorFlow takes seconds to import. Begun at the process's start (worker/preimport.py,
a background thread), it overlaps the engine's own imports and its registration with
the controller, instead of starting after them (an engine's startup command only runs
once it has registered).
"""

from . import preimport  # noqa: F401  (starts the import)

if __name__ == "__main__":
    from ipyparallel.engine.app import main

    main()
