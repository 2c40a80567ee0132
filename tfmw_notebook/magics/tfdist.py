"""The `%tfdist` / `%%tfdist` magics: a thin layer over TFCluster.

Parsing only (parsers.py), then one call into the cluster layer, by command group:
lifecycle.py, cells.py, checkpoint_commands.py, views.py, run_commands.py,
tracking_commands.py. No TensorFlow here, so `%load_ext tfmw_notebook` stays fast.
"""

from __future__ import annotations

import argparse
import copy
import functools

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class

from ..errors import called_from_magic
from .cells import CellCommand
from .checkpoint_commands import CheckpointCommands
from .lifecycle import LifecycleCommands
from .line_split import arguments
from .parsers import CELL_PARSER, LINE_PARSER, command_list, help_text
from .run_commands import RunCommands
from .session import NotebookSession
from .tracking_commands import TrackingCommands
from .views import ViewCommands

__all__ = ["TFDistMagics", "LINE_PARSER", "CELL_PARSER"]


@magics_class
class TFDistMagics(Magics, LifecycleCommands, CellCommand, CheckpointCommands, ViewCommands,
                   RunCommands, TrackingCommands):
    """%tfdist / %%tfdist; `session` holds this kernel's cluster, last run and preferences."""

    def __init__(self, shell=None, **kwargs):
        super().__init__(shell, **kwargs)
        self.session = NotebookSession()

    @line_cell_magic
    def tfdist(self, line: str, cell: str | None = None):
        # Errors and notices raised below name magics and their options, not API calls.
        with called_from_magic():
            return self._dispatch(line, cell)

    def _dispatch(self, line: str, cell: str | None):
        if cell is None:
            args = LINE_PARSER.parse_args(arguments(line))
            if args.command is None:
                raise UsageError(f"%tfdist needs a command: {command_list()} (see %tfdist?)")
            return getattr(self, f"_{args.command}")(args)
        return self._cell(cell_arguments(line), cell)


def cell_arguments(line: str) -> argparse.Namespace:
    """The options of a `%%tfdist` line, parsed once per distinct line, not at every run of
    its cell (a copy each time: a sweep sets fields on it); a bad line raises each time."""
    return copy.copy(_parsed_cell_line(line))


@functools.lru_cache(maxsize=64)
def _parsed_cell_line(line: str) -> argparse.Namespace:
    return CELL_PARSER.parse_args(arguments(line))


TFDistMagics.tfdist.__doc__ = help_text()
