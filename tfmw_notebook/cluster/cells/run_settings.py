"""How one `TFCluster.run` goes: the settings that flow from the call to each attempt
and to the cell watch. Notebook side only (callbacks and streams are not sent)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TextIO

from ...errors import BadArgument
from ...protocol.run_options import CellOptions, StallLimits


@dataclass(frozen=True)
class RunSettings:
    """`options`: what the cell's Keras calls get (sent to the workers; by default
    their training events are reported: `cluster.history()`);
    `timeout`: stop every worker when the cell runs longer; `all_output`: every
    worker's stdout, not only the chief's; `want_display`: the chief's last
    expression value; `max_restarts`: retries after a dead worker or a retryable
    error; `restore`: give state back after a restart (None: the cluster's
    setting); `stall`: when a worker stuck in its own code is named or stopped;
    `record`: replay this cell after a restart; `scope`: run the cell inside the
    shared strategy's scope (False: outside, for inference on a loaded SavedModel);
    `stdout`/`stderr`: where the workers' output goes (default: this process's);
    `on_data(rank, data)`: each rank's published data as it arrives;
    `on_stall(rank, seconds, where)`: a worker stuck in its own code."""

    # From a script the training metrics are wanted too (cluster.history()): reporting on.
    options: CellOptions = field(default_factory=lambda: CellOptions(report=True))
    timeout: float | None = None
    all_output: bool = False
    want_display: bool = True
    max_restarts: int = 0
    restore: bool | None = None
    stall: StallLimits = field(default_factory=StallLimits)
    record: bool = True
    scope: bool = True
    stdout: TextIO | None = None
    stderr: TextIO | None = None
    on_data: Callable[[int, dict], None] | None = None
    on_stall: Callable[[int, float, str], None] | None = None

    def __post_init__(self) -> None:
        if (isinstance(self.max_restarts, bool) or not isinstance(self.max_restarts, int)
                or self.max_restarts < 0):
            raise BadArgument(f"Invalid value for argument `max_restarts`. Received: "
                              f"max_restarts={self.max_restarts!r}. Expected an integer >= 0")
        if not isinstance(self.options, CellOptions):
            raise BadArgument(f"Invalid value for argument `options`. Received: "
                              f"options={self.options!r}. Expected a CellOptions")
        if self.timeout is not None and not self.timeout > 0:
            raise BadArgument(f"Invalid value for argument `timeout`. Received: "
                              f"timeout={self.timeout!r}. Expected seconds > 0 or None")

