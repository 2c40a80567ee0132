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
    """One line naming what went wrong: 'NameError: name 'x' is not defined'.

    The exception's name and the line of its message that names the cause: the first,
    unless that is a header (see message_cause). For a worker's exception (an
    ipyparallel RemoteError) its `ename` and `evalue`.
    """
    ename = getattr(exc, "ename", None) or type(exc).__name__
    evalue = getattr(exc, "evalue", None)
    named, said = message_cause(str(exc) if evalue is None else str(evalue))
    if said:
        return _clause(f"{named or ename}: {said}")
    # A chained exception is named by its outermost one (`raise B from A`, or B raised
    # while handling A: B): the one the code chose to raise, which Python prints last
    # and an `except` catches; A is in the worker's traceback, shown above this line.
    # Only a B that says nothing itself (no message, or headers only) is named by A.
    cause = chained_cause(exc)
    return _clause(f"{ename} ({cause})" if cause else ename)


def _clause(line: str) -> str:
    """The summary as its callers go on after it ("... failed: S. Every worker ...",
    "raised S; its traceback:"): one line, short, no period of its own to double theirs."""
    line = shortened(line)
    return line[:-1] if line.endswith(".") and not line.endswith("..") else line


# Messages whose first line names no cause, as TensorFlow 2.21, tf-keras 2.21 and Keras
# 3.15 write them (tests/test_error_summaries.py holds the ones seen):
# - a tf.function's error: "in user code:", the user's frames, then "    ValueError: ..."
#   (its last lines; the exception's name is the original one's);
# - Keras' layer-call wrapper: "Exception encountered when calling layer ...", then the
#   cause (tf-keras: often a tf.function's error; Keras 3: a paragraph of its own);
# - an embedded Python traceback (Dataset.from_generator, tf.py_function), after TF's
#   "{{function_node ...}}" prefix: its last error line names the outermost exception.
_HEADER = re.compile(r"in user code:|Traceback \(most recent call last\):"
                     r"|The above exception was the direct cause of the following exception:"
                     r"|During handling of the above exception, another exception occurred:"
                     r"|Exception encountered when calling .*|[\"']{3}|-{3,}|")
_CHAINS = {"The above exception was the direct cause of the following exception:": "from",
           "During handling of the above exception, another exception occurred:":
           "while handling"}
_FUNCTION_NODE = re.compile(r"\{\{function_node [^}]*\}\}\s*")
_ERROR_LINE = re.compile(   # a line that names its error: "RuntimeError: bad record 2"
    r"((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Iteration|Warning))"
    r": (.*)")
_FRAME_END = re.compile(r"([A-Za-z_][\w.]*): (.*)")   # below a frame, any "Name: text"
SUMMARY_WIDTH = 300


def message_cause(text: str) -> tuple[str, str]:
    """(error name, line): the line of an exception's message that names its cause, and
    the error it names when the line says so itself ("" if not). ("", "") for a message
    of headers only."""
    lines = [_FUNCTION_NODE.sub("", _ANSI.sub("", line)).rstrip() for line in text.splitlines()]
    said = [line.strip() for line in lines if line.strip()]
    if said and not _HEADER.fullmatch(said[0]):
        named, rest = _named(said[0], _ERROR_LINE)
        if not _HEADER.fullmatch(rest):
            return named, rest
    start = _after_last_frame(lines)
    pattern = _FRAME_END if start else _ERROR_LINE
    for line in (line.strip() for line in lines[start:]):
        named, rest = _named(line, pattern)
        if not _HEADER.fullmatch(rest):
            return named, rest
        # "ValueError: Exception encountered when calling ...": the cause is below it
    return "", ""


def _named(line: str, pattern: re.Pattern[str]) -> tuple[str, str]:
    match = pattern.fullmatch(line)
    return (match.group(1), match.group(2)) if match else ("", line)


def _after_last_frame(lines: list[str]) -> int:
    """Where a message's text goes on after its last `File "..."` frame (its source
    lines are indented deeper); 0 if it has none."""
    frames = [index for index, line in enumerate(lines) if line.lstrip().startswith('File "')]
    if not frames:
        return 0
    depth = _indent(lines[frames[-1]])
    index = frames[-1] + 1
    while index < len(lines) and (not lines[index].strip() or _indent(lines[index]) > depth):
        index += 1
    return index


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def chained_cause(exc: BaseException) -> str:
    """What `exc` was raised from ("from KeyError: 'x'", "while handling ..."): its own
    chain, or a worker's traceback (the error line above its last chain line); "" when
    it was raised from nothing."""
    text = getattr(exc, "traceback", None)
    if getattr(exc, "ename", None) and isinstance(text, str):
        return _chained_in_traceback(text)
    if exc.__cause__ is not None:
        return f"from {remote_summary(exc.__cause__)}"
    if exc.__context__ is not None and not exc.__suppress_context__:
        return f"while handling {remote_summary(exc.__context__)}"
    return ""


def _chained_in_traceback(text: str) -> str:
    lines = [_ANSI.sub("", line).rstrip() for line in text.splitlines()]
    chains = [index for index, line in enumerate(lines) if line.strip() in _CHAINS]
    if not chains:
        return ""
    for line in reversed(lines[:chains[-1]]):
        if _FRAME_END.fullmatch(line) or re.fullmatch(r"[A-Za-z_][\w.]*", line):
            return f"{_CHAINS[lines[chains[-1]].strip()]} {line}"
    return ""


def shortened(line: str, width: int = SUMMARY_WIDTH) -> str:
    """`line` cut at a word to at most `width` characters, " ..." saying so."""
    if len(line) <= width:
        return line
    cut = line.rfind(" ", width // 2, width - 3)
    return line[:cut if cut > 0 else width - 4].rstrip() + " ..."


def headed(text: str, rank: int, summary: str) -> str:
    """A worker's traceback under one line naming the worker and its error."""
    return f"[worker {rank}] raised {summary}; its traceback:\n{text.rstrip()}\n"
