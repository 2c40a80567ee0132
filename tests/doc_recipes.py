"""The cluster recipes of docs/several-machines.md's table, as the tests run them.

A test takes its commands from that page instead of keeping a copy, so a recipe that
stops working fails a test instead of misleading a reader. Each table row names how
the engines start (first column); its code spans are sorted by what they are:
`ipcluster ...` commands, `c.X = ...` lines of `ipcluster_config.py`, and `%tfdist ...`
lines for the notebook. Anything else in backticks is prose.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

RECIPES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs",
                       "several-machines.md")


@dataclass
class Recipe:
    commands: list[str] = field(default_factory=list)   # shell commands, on the cluster
    config: list[str] = field(default_factory=list)     # `ipcluster_config.py` lines
    notebook: list[str] = field(default_factory=list)   # lines for a notebook cell

    def sized(self, replacements: dict[str, str]) -> Recipe:
        """The recipe with each `old` -> `new` applied to every line; each must occur.

        For sizes (engines, GPUs) that this machine cannot give: the replacements
        are listed in the test, in plain view."""
        groups = [list(self.commands), list(self.config), list(self.notebook)]
        for old, new in replacements.items():
            if not any(old in line for group in groups for line in group):
                raise AssertionError(f"the recipe no longer contains {old!r}: update the test")
            groups = [[line.replace(old, new) for line in group] for group in groups]
        return Recipe(*groups)


def recipe(row: str, path: str = RECIPES) -> Recipe:
    """The recipe in the table row whose first column is `row` (e.g. "Slurm")."""
    with open(path) as f:
        text = f.read()
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split(" | ")]
        if line.startswith("|") and cells[0] == row:
            return _sorted_spans(re.findall(r"`([^`]+)`", line))
    raise AssertionError(f"no {row!r} row in the recipes table of {path}")


def _sorted_spans(spans: list[str]) -> Recipe:
    found = Recipe()
    for span in spans:
        if span.startswith("ipcluster "):
            found.commands.append(span)
        elif re.match(r"c\.\w+(\.\w+)+ = ", span):
            found.config.append(span)
        elif span.startswith("%tfdist "):
            found.notebook.append(span)
    return found
