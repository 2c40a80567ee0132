"""The notebook's one door to the engines' code: every worker module it names, by name.

The notebook side starts engine processes and sends them code that imports worker modules;
it names those modules only here (worker/entry.py names, on the engine side, the functions
a call may reach). Standard library only: the launch code and the stand-ins import it.
"""

from __future__ import annotations

PACKAGE = "tfmw_notebook.worker"
ENGINE_MAIN = f"{PACKAGE}.boot.engine_main"        # an engine process: `python -m`
FORK_SERVER = f"{PACKAGE}.boot.engine_forkserver"  # the fork server process: `python -m`
PREIMPORT = f"{PACKAGE}.boot.preimport"            # a spare's start-up command imports it
ENTRY = f"{PACKAGE}.entry"                         # calls into the worker: entry.call(name, ...)


def startup_import(module: str) -> str:
    """Code for an engine's namespace that imports `module` and binds no name there."""
    return f"__import__({module!r})"


def entry_call_code(entry: str, *args: object) -> str:
    """Code that calls worker entry `entry` with `args` (their reprs) on an engine."""
    arguments = "".join(f", {arg!r}" for arg in args)
    return f"__import__({ENTRY!r}, fromlist=['call']).call({entry!r}{arguments})"
