"""The one-process reference run of a corpus program: `python -m corpus.one_process`.

Reads {"sources": [DATA, *CELLS], "loss": LOSS} as JSON on stdin, runs each source as a
cell of an IPython shell (so `!` and `%` lines work as in a notebook), stopping at the
first error, and prints one line `CORPUS_RESULT {"loss": ...}` or
`CORPUS_RESULT {"error": "Type: message"}`. The caller sets the environment (no
TF_CONFIG, the workers' TF_USE_LEGACY_KERAS) and the deadline.
"""

from __future__ import annotations

import json
import sys
import traceback


def run(sources: list[str], loss: str) -> dict:
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    for source in sources:
        outcome = shell.run_cell(source, store_history=False)
        error = outcome.error_before_exec or outcome.error_in_exec
        if error is not None:
            return {"error": f"{type(error).__name__}: {error}"}
    try:
        return {"loss": float(shell.ev(loss))}
    except Exception as exc:   # a LOSS expression the program cannot answer
        traceback.print_exc()
        return {"error": f"{type(exc).__name__}: {exc}"}


def main() -> None:
    spec = json.load(sys.stdin)
    result = run(spec["sources"], spec["loss"])
    sys.stdout.flush()
    print("CORPUS_RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
