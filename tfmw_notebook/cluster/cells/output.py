"""Relay the workers' stdout/stderr to the notebook, a `[worker i]` prefix per line."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from typing import TextIO

_LINE_STARTS = re.compile(r"(\n|\r(?!\n))")


class PrefixedStream:
    """Adds a prefix at the start of every line (and after a bare carriage return,
    which progress bars use to redraw a line) of a growing text."""

    def __init__(self, prefix: str):
        self.prefix = prefix
        self._at_line_start = True

    def feed(self, text: str) -> str:
        out = []
        for piece in _LINE_STARTS.split(text):
            if not piece:
                continue
            if piece in ("\n", "\r"):
                out.append(piece)
                self._at_line_start = True
                continue
            if self._at_line_start:
                out.append(self.prefix)
                self._at_line_start = False
            out.append(piece)
        return "".join(out)


class OutputRelay:
    """Forwards what each rank has written so far, once, as it grows.

    `sources(rank)` returns the rank's full (stdout, stderr) text so far; the relay
    remembers how much of each it already forwarded.
    """

    def __init__(self, ranks: int, *, all_output: bool,
                 stdout: TextIO | None = None, stderr: TextIO | None = None):
        self.all_output = all_output
        self._stdout = stdout
        self._stderr = stderr
        self._seen: dict[tuple[int, str], int] = {}
        self._streams = {
            (rank, name): PrefixedStream(f"[worker {rank}] ")
            for rank in range(ranks) for name in ("stdout", "stderr")
        }

    def wanted(self, rank: int, name: str) -> bool:
        # By default: the chief's stdout (the others print the same things) and
        # every worker's stderr (where errors and warnings go).
        return self.all_output or name == "stderr" or rank == 0

    def forward(self, rank: int, name: str, text: str) -> None:
        if not self.wanted(rank, name):
            return
        start = self._seen.get((rank, name), 0)
        if len(text) <= start:
            return
        self._seen[(rank, name)] = len(text)
        target = (self._stdout or sys.stdout) if name == "stdout" else (self._stderr or sys.stderr)
        target.write(self._streams[(rank, name)].feed(text[start:]))
        target.flush()

    def poll(self, texts: Callable[[int], tuple[str, str]], ranks: int) -> None:
        for rank in range(ranks):
            out, err = texts(rank)
            self.forward(rank, "stdout", out)
            self.forward(rank, "stderr", err)
