"""A notebook open in JupyterLab 4 or Notebook 7, as a test sees and drives it.

Waits ask the app's own model (window.jupyterapp) whether cells still run; what the
user would see is checked on the page itself.
"""

from __future__ import annotations

import time

_STATE = """() => {
  const panel = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  if (!panel || !panel.content || !panel.content.model) return null;
  const cells = panel.content.model.cells;
  let running = 0, unrun = 0, code = 0;
  for (let i = 0; i < cells.length; i++) {
    const cell = cells.get(i);
    if (cell.type !== 'code') continue;
    code++;
    if (cell.executionState === 'running') running++;
    if (cell.executionCount === null) unrun++;
  }
  const kernel = panel.sessionContext.session && panel.sessionContext.session.kernel;
  return {code, running, unrun, kernel: kernel ? kernel.status : null,
          dirty: panel.context.model.dirty};
}"""


def notebook_url(server, name: str) -> str:
    return server.url(f"lab/tree/{name}" if server.app == "lab" else f"notebooks/{name}")


def state(page) -> dict | None:
    return page.evaluate(_STATE)


def wait_for(page, predicate, seconds: float, what: str, poll: float = 0.25):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        current = state(page)
        if current is not None and predicate(current):
            return current
        time.sleep(poll)
    raise TimeoutError(f"{what} not within {seconds:g} s (last state: {state(page)})")


def open_notebook(page, server, name: str) -> None:
    page.goto(notebook_url(server, name))
    wait_for(page, lambda s: s["kernel"] == "idle", 90, f"{name} open with an idle kernel")


def command(page, name: str, args: dict | None = None, wait: bool = True) -> None:
    """Execute an app command; with `wait`, until the promise it returns settles (for
    run-all, that is when the last cell ends)."""
    if wait:
        page.evaluate("([name, args]) => window.jupyterapp.commands.execute(name, args)",
                      [name, args or {}])
    else:
        page.evaluate("([name, args]) => { window.jupyterapp.commands.execute(name, args); }",
                      [name, args or {}])


def run_all(page) -> None:
    """Run all, from cleared outputs: a cell is run once it has an execution count again
    (the kernel is idle for a moment between cells, so that alone says nothing)."""
    command(page, "notebook:clear-all-cell-outputs")
    wait_for(page, lambda s: s["unrun"] == s["code"], 30, "outputs cleared")
    command(page, "notebook:run-all-cells", wait=False)


def wait_until_run(page, seconds: float) -> dict:
    """Until every code cell has run and the kernel is idle."""
    return wait_for(page, lambda s: not s["running"] and not s["unrun"] and s["kernel"] == "idle",
                    seconds, "every cell run")


def save(page) -> None:
    command(page, "docmanager:save")
    wait_for(page, lambda s: not s["dirty"], 30, "the notebook saved")


def cell_containing(page, text: str):
    """The cell (DOM) whose input contains `text`."""
    return page.locator(".jp-Cell").filter(
        has=page.locator(".jp-InputArea", has_text=text)).first
