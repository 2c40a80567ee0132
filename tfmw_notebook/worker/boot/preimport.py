"""Start importing TensorFlow the moment an engine starts (its startup command).

TensorFlow takes seconds to import; doing it in a background thread lets that
overlap with engine registration and the TF_CONFIG handshake. The engine's
environment already holds what TF reads at import (TF_USE_LEGACY_KERAS, log
level, hidden GPUs when none are wanted). TF_CONFIG and a worker's GPUs
(CUDA_VISIBLE_DEVICES) are set later by the bootstrap, still in time: TF reads
them when the strategy is created. The import loads no CUDA driver; libcuda is
opened, and reads CUDA_VISIBLE_DEVICES, when TF first lists its devices
(measured with TF 2.21 and Keras 3: LD_DEBUG=libs shows no libcuda until then).
The bootstrap's own `import tensorflow` waits for this import to finish and
reports any error it raised. Keras' optional extras, which that import would load too,
wait for a cell's first use (deferred_imports.py). TensorFlow's C++ start-up logging
goes through a filter from here until the bootstrap has made the strategy
(protocol/startup_log.py). Python's cyclic garbage collector is off during the import: it
ran five full collections there, a quarter of the import's CPU time (2.2 CPU-s with them,
1.7 without, TensorFlow 2.21; what they freed, up to a few hundred objects, stays).
"""

import contextlib
import gc
import threading

from ...protocol import startup_log
from . import deferred_imports


def _import_tensorflow() -> None:
    # Any failure is left to the bootstrap: it imports again and says what is wrong.
    gc.disable()
    try:
        with contextlib.suppress(BaseException):
            import tensorflow  # noqa: F401
    finally:
        gc.enable()


startup_log.begin()
deferred_imports.install()
threading.Thread(target=_import_tensorflow, name="tfmw-preimport", daemon=True).start()
