"""Errors the notebook shows: one clear line, plus a worker's traceback where there is one.

Also how a worker's remote exception is read: its summary line, and its
traceback with our own frames dropped.
"""

from __future__ import annotations

import os
import re


class TFDistError(RuntimeError):
    """Base class: shown by IPython without the client-side traceback."""

    def _render_traceback_(self) -> list[str]:
        return [f"{type(self).__name__}: {self}"]


class BadArgument(TFDistError, ValueError):
    """An argument the caller got wrong; the magics show it as a one-line usage error."""


class ClusterSetupError(TFDistError):
    """The cluster could not be started, attached or bootstrapped."""


class NoClusterError(TFDistError):
    """An operation needs a running cluster and there is none."""


class WorkerFailed(TFDistError):
    """A cell failed on the cluster; the workers were kept, or brought back.

    `rank` is the first worker seen failing (None when no single worker is to
    blame, e.g. an interrupt), `traceback` its remote traceback text,
    `error_name` / `error_value` its exception ("NameError", "name 'x' is not
    defined"). `kept`: every worker finished the cell and they were kept as
    they were; `recovered`: a fresh, ready worker group is in place;
    `restored`: what the restore after the restart said ("" if none ran).
    """

    def __init__(self, message: str, *, rank: int | None = None, traceback: str = "",
                 reason: str = "error", detected_at: float | None = None,
                 recovered: bool = False, retryable: bool = False, summary: str = "",
                 kept: bool = False, restored: str = "", error_name: str = "",
                 error_value: str = ""):
        super().__init__(message)
        self.rank = rank
        self.traceback = traceback
        # "error", "died", "lost" (not heard from), "controller", "timeout" or "interrupt"
        self.reason = reason
        self.detected_at = detected_at
        self.recovered = recovered          # a fresh, ready worker group is in place
        self.retryable = retryable          # a peer died / collective aborted, not a bug
        self.summary = summary or message   # what happened, without the recovery story
        self.kept = kept                    # the same workers, with their variables
        self.restored = restored
        self.error_name = error_name
        self.error_value = error_value
        self.hints: list[str] = []

    def add_hint(self, text: str) -> None:
        """One more line under the error, e.g. how to fix a name the workers lack."""
        self.hints.append(text)

    def _render_traceback_(self) -> list[str]:
        # The traceback was already shown the moment the failure was seen;
        # repeat it under the summary so a saved notebook has both together.
        lines = []
        if self.traceback:
            lines.extend(self.traceback.rstrip("\n").splitlines())
        lines.append(f"{type(self).__name__}: {self}")
        lines.extend(self.hints)
        return lines


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


def prefixed(text: str, rank: int) -> str:
    """Every line marked with the worker it came from."""
    return "".join(f"[worker {rank}] {line}\n" for line in text.rstrip("\n").splitlines())
