"""The one function the notebook sends to an engine: import a worker module there, call it.

Sent by reference (this module is installed on every engine), so the engine runs
its own copy of the worker code; its frames are dropped from tracebacks shown to
the user.
"""

from __future__ import annotations


def call(module: str, function: str, *args):
    import importlib

    return getattr(importlib.import_module(module), function)(*args)
