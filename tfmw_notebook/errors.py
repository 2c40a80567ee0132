"""Errors the notebook shows: one clear line, plus a worker's traceback where there is one.

Also how a worker's remote exception is read: its summary line, and its
traceback with our own frames dropped.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Literal

# -- wording: API calls for the Python API, magics for the magics ---------------------
#
# Messages are written as the Python API says things (`cluster.restart()`,
# `timeout=30`); while a magic runs, they are said as the magic's user would type them.

_magic_caller: ContextVar[bool] = ContextVar("tfdist_magic_caller", default=False)
_CALL = re.compile(r"`(?:cluster|TFCluster)\.(\w+)\(([^`]*)\)`")
_STALL = re.compile(r"`StallLimits\(timeout=([^`]*)\)`")
_KEYWORD = re.compile(r"`(\w+)=([^`]*)`")
_NEGATED = {"isolate": "--no-isolation"}


@contextmanager
def called_from_magic() -> Iterator[None]:
    """Within it, messages name magics and their options (see magic_words)."""
    token = _magic_caller.set(True)
    try:
        yield
    finally:
        _magic_caller.reset(token)


def _option(name: str, value: str) -> str:
    value = value.strip().strip("'\"")
    if value == "False" and name in _NEGATED:
        return _NEGATED[name]
    flag = ("-" if len(name) == 1 else "--") + name.replace("_", "-")   # n=4: -n 4
    return f"{flag} {value}" if value else flag


def _command(match: re.Match) -> str:
    keywords = [part.split("=", 1) for part in match.group(2).split(", ") if "=" in part]
    return "`" + " ".join(["%tfdist", match.group(1)]
                          + [_option(name, value) for name, value in keywords]) + "`"


def magic_words(text: str) -> str:
    """An API message as the magics say it: `cluster.restart()` -> `%tfdist restart`,
    `TFCluster.attach(url_file='f')` -> `%tfdist attach --url-file f`, `timeout=30` ->
    --timeout 30, `StallLimits(timeout=5)` -> --stall-timeout 5."""
    text = _STALL.sub(lambda match: f"--stall-timeout {match.group(1)}", text)
    text = _CALL.sub(_command, text)
    return _KEYWORD.sub(lambda match: _option(match.group(1), match.group(2)), text)


def for_caller(text: str) -> str:
    """`text` in the words of whoever called: a magic, or the Python API."""
    return magic_words(text) if _magic_caller.get() else text


class TFDistError(RuntimeError):
    """Base class: shown by IPython without the client-side traceback.

    Its message names API calls, or magics when raised while a magic runs."""

    def __init__(self, *args):
        if args and isinstance(args[0], str):
            args = (for_caller(args[0]), *args[1:])
        super().__init__(*args)

    def _render_traceback_(self) -> list[str]:
        return [f"{type(self).__name__}: {self}"]


class BadArgument(TFDistError, ValueError):
    """An argument the caller got wrong; the magics show it as a one-line usage error."""


class ClusterSetupError(TFDistError):
    """The cluster could not be started, attached or bootstrapped."""


class NoClusterError(TFDistError):
    """An operation needs a running cluster and there is none."""


FailureKind = Literal["error", "died", "lost", "controller", "timeout", "interrupt"]


@dataclass(frozen=True)
class Failure:
    """How a cell failed on the workers, as the notebook saw it.

    `kind`: a worker raised ("error"), died, was not heard from ("lost"), the
    controller stopped answering, the cell overran ("timeout"), or the user
    interrupted it. `rank` is the first worker seen failing (None when no single
    worker is to blame), `traceback` its remote traceback, `error_name` /
    `error_value` its exception ("NameError", "name 'x' is not defined").
    `retryable`: a peer died or a collective aborted (not a bug in the cell);
    `all_finished`: every worker raised or returned; `lost_hosts`: other hosts
    whose workers went silent.
    """

    summary: str
    kind: FailureKind = "error"
    rank: int | None = None
    traceback: str = ""
    retryable: bool = False
    all_finished: bool = False
    error_name: str = ""
    error_value: str = ""
    lost_hosts: tuple[str, ...] = ()
    detected_at: float = field(default_factory=time.monotonic)


class WorkerFailed(TFDistError):
    """A cell failed on the cluster: what happened (`failure`), and what was done.

    Raised first by one attempt of a cell (nothing done yet), then again by the
    recovery with its outcome: `kept` (every worker finished the cell and they
    were kept as they were), `recovered` (a fresh, ready worker group is in place),
    `restored` (what the restore after the restart said, "" if none ran).
    """

    def __init__(self, failure: Failure, message: str | None = None, *,
                 kept: bool = False, recovered: bool = False, restored: str = ""):
        super().__init__(message or failure.summary)
        self.failure = failure
        self.kept = kept
        self.recovered = recovered
        self.restored = restored
        self.hints: list[str] = []

    rank = property(lambda self: self.failure.rank)
    traceback = property(lambda self: self.failure.traceback)
    reason = property(lambda self: self.failure.kind)
    retryable = property(lambda self: self.failure.retryable)
    summary = property(lambda self: self.failure.summary)
    error_name = property(lambda self: self.failure.error_name)
    error_value = property(lambda self: self.failure.error_value)
    detected_at = property(lambda self: self.failure.detected_at)

    def add_hint(self, text: str) -> None:
        """One more line under the error, e.g. how to fix a name the workers lack."""
        self.hints.append(text)

    def _render_traceback_(self) -> list[str]:
        # The worker's traceback was shown (once, headed by the worker) the moment the
        # failure was seen, long before a restart ends: not again here.
        return [f"{type(self).__name__}: {self}", *self.hints]


# -- reading a worker's exception -----------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_INTERNAL_FRAMES = ("tfmw_notebook" + os.sep + "worker" + os.sep, "ipyparallel" + os.sep,
                    "<string>")


def is_engine_death(exc: BaseException) -> bool:
    """ipyparallel's way of saying the engine running the task went away."""
    import ipyparallel.error as ipp_error

    if isinstance(exc, ipp_error.EngineError):
        return True
    return getattr(exc, "ename", "") == "EngineError"


def remote_traceback(exc: BaseException) -> str:
    text = getattr(exc, "traceback", None)
    if isinstance(text, str) and text:
        return drop_internal_frames(text)
    return ""


def drop_internal_frames(text: str) -> str:
    """Keep the user's frames: drop those of our runner, ipyparallel and exec.

    Frames are blocks that start at a `File ...` line and end at a blank line
    (IPython's format); the header and the final error line are kept.
    """
    kept, skipping = [], False
    for line in text.splitlines(keepends=True):
        plain = _ANSI.sub("", line).strip()
        if plain.startswith("File "):
            skipping = any(marker in plain for marker in _INTERNAL_FRAMES)
        elif not plain and skipping:
            skipping = False
            continue  # the blank line that closed a dropped frame
        if not skipping:
            kept.append(line)
    return "".join(kept)


def remote_summary(exc: BaseException) -> str:
    """'NameError: name 'x' is not defined': the exception's name and first line."""
    ename = getattr(exc, "ename", None) or type(exc).__name__
    evalue = getattr(exc, "evalue", None)
    if evalue is None:
        evalue = str(exc)
    evalue = str(evalue).strip().splitlines()[0] if str(evalue).strip() else ""
    return f"{ename}: {evalue}" if evalue else ename


def headed(text: str, rank: int, summary: str) -> str:
    """A worker's traceback under one line naming the worker and its error."""
    return f"[worker {rank}] raised {summary}; its traceback:\n{text.rstrip()}\n"
