"""The tutorials under nbval: a refused magic fails its cell.

IPython shows a `UsageError` (a magic refusing its arguments) as text on stderr, not as
an error output, so nbval alone passes a cell whose magic never ran. After each cell
runs, its fresh outputs are read: a line starting "UsageError:" fails the cell, unless
the cell is tagged `raises-usage-error` (a tutorial showing a refusal on purpose), and
then the cell fails if no UsageError came. Conventions for the tutorials' cells:
`nbval-ignore-output` where the output varies (notebooks/sanitize.cfg masks ports,
times and pids), `raises-exception` where an error is the point, `raises-usage-error`
where a refusal is.
"""

from __future__ import annotations

import re

import pytest
from nbval.plugin import IPyNbCell

EXPECTS_REFUSAL = "raises-usage-error"
_REFUSAL = re.compile(r"^UsageError: .*$", re.MULTILINE)


def refusals(outputs) -> list[str]:
    """The UsageError lines in a cell's stderr outputs."""
    return [line for output in outputs or ()
            if output.get("output_type") == "stream" and output.get("name") == "stderr"
            for line in _REFUSAL.findall(output.get("text") or "")]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    result = yield   # nbval ran the cell (a cell that failed or was skipped raised already)
    if isinstance(item, IPyNbCell) and item.test_outputs is not None:
        found = refusals(item.test_outputs)
        expected = EXPECTS_REFUSAL in (item.cell.metadata.get("tags") or ())
        if found and not expected:
            item.raise_cell_error(f"a magic was refused: {found[0]} (tag the cell "
                                  f"{EXPECTS_REFUSAL!r} if the refusal is the point)")
        if expected and not found:
            item.raise_cell_error(f"the cell is tagged {EXPECTS_REFUSAL!r} but no "
                                  "UsageError was shown")
    return result
