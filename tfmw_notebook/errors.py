"""Errors the notebook shows: one clear line, plus a worker's traceback where there is one."""

from __future__ import annotations


class TFDistError(RuntimeError):
    """Base class: shown by IPython without the client-side traceback."""

    def _render_traceback_(self) -> list[str]:
        return [f"{type(self).__name__}: {self}"]


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
        self.reason = reason                # "error", "died", "timeout" or "interrupt"
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
