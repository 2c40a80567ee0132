"""The one-process reference run of a corpus program: `python -m corpus.one_process`.

Reads {"sources": [DATA, *CELLS], "loss": LOSS, "replicas": N} as JSON from the file named
as its argument (or stdin), runs each
source as a cell of an IPython shell (so `!` and `%` lines work as in a notebook), stopping at the
first error, and prints one line `CORPUS_RESULT {"loss": ...}` or
`CORPUS_RESULT {"error": "Type: message"}`. The caller sets the environment (no
TF_CONFIG, the workers' TF_USE_LEGACY_KERAS) and the deadline.

With N > 1 replicas every cell runs inside the scope of a MirroredStrategy over N logical
CPU devices, as the workers' cells run inside the shared strategy's: the same replicas, each
with its share of the global batch, in one process (see REFERENCE_REPLICAS in the README).
"""

from __future__ import annotations

import contextlib
import json
import sys
import traceback


def run(sources: list[str], loss: str, replicas: int = 1) -> dict:
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    scope = _replicated_scope(replicas) if replicas > 1 else contextlib.nullcontext
    for source in sources:
        with scope():
            outcome = shell.run_cell(source, store_history=False)
        error = outcome.error_before_exec or outcome.error_in_exec
        if error is not None:
            return {"error": f"{type(error).__name__}: {error}"}
    try:
        return {"loss": float(shell.ev(loss))}
    except Exception as exc:   # a LOSS expression the program cannot answer
        traceback.print_exc()
        return {"error": f"{type(exc).__name__}: {exc}"}


def _replicated_scope(replicas: int):
    """What each cell runs in: the scope of a MirroredStrategy over `replicas` CPUs."""
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(replicas)])
    strategy = tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(replicas)])
    return strategy.scope


def main() -> None:
    if len(sys.argv) > 1:
        with open(sys.argv[1]) as f:
            spec = json.load(f)
    else:
        spec = json.load(sys.stdin)
    result = run(spec["sources"], spec["loss"], spec.get("replicas", 1))
    sys.stdout.flush()
    print("CORPUS_RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
