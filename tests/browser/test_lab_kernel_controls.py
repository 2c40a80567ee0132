"""JupyterLab's own controls act on the whole cluster: the toolbar's interrupt button
stops every worker; restarting the kernel from the menu leaves no process behind."""

import os
import re
import time

import nbformat
import psutil
import pytest
from notebook_page import cell_containing, open_notebook, run_all, state, wait_for

pytestmark = pytest.mark.timeout(400)

LONG_FIT = '''%%tfdist --no-checkpoint
model.fit(data, epochs=1000, steps_per_epoch=50, verbose=0)'''
CELLS = [
    "%load_ext tfmw_notebook\n%tfdist start -n 2",
    '''%%tfdist
import numpy as np
x = np.random.RandomState(0).normal(size=(512, 8)).astype("float32")
data = tf.data.Dataset.from_tensor_slices((x, x[:, :1])).repeat().batch(32)
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Input((8,)), tf.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")''',
    LONG_FIT,
]


def write_notebook(root, name, cells):
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                       "language": "python"}
    nbformat.write(notebook, os.path.join(root, name))


def workers_running(server):
    """Engine processes below the server (through its kernel): %tfdist start forks them
    from its fork server (`tfmw_notebook.worker.boot.engine_forkserver`), or launches
    `tfmw_notebook.worker.boot.engine_main` where it cannot; an `ipyparallel.engine` nanny,
    where there is one, runs the same command as its engine's child, and is left out."""
    below = server.descendants()
    servers = {p.pid for p in below
               if "tfmw_notebook.worker.boot.engine_forkserver" in " ".join(_cmdline(p))}
    engines = [p for p in below
               if _ppid(p) in servers
               or any(name in " ".join(_cmdline(p))
                      for name in ("ipyparallel.engine", "tfmw_notebook.worker.boot.engine_main"))]
    pids = {p.pid for p in engines}
    return [p for p in engines if _ppid(p) not in pids]


def _ppid(process) -> int | None:
    try:
        return process.ppid()
    except psutil.Error:
        return None


def seconds_until_gone(pids, since: float, limit: float) -> float:
    """Seconds from `since` until none of `pids` runs (a zombie has stopped running)."""
    deadline = since + limit
    while time.monotonic() < deadline:
        if not any(_running(pid) for pid in pids):
            return time.monotonic() - since
        time.sleep(0.05)
    raise AssertionError(f"workers {sorted(pids)} still ran {limit:.0f} s after the interrupt")


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _cmdline(process):
    try:
        return process.cmdline()
    except psutil.Error:
        return []


def training_started(page, screenshots):
    cell = cell_containing(page, "epochs=1000")
    try:
        cell.locator(".tfmw-worker-progress").first.wait_for(state="visible", timeout=180_000)
    finally:
        page.screenshot(path=os.path.join(screenshots, "training.png"))
    return cell


def test_the_toolbar_interrupt_button_stops_every_worker(start_app, page, screenshots):
    server = start_app("lab")
    write_notebook(server.root_dir, "interrupt.ipynb", CELLS)
    open_notebook(page, server, "interrupt.ipynb")
    run_all(page)
    training = training_started(page, screenshots)
    engines = {p.pid for p in workers_running(server)}
    assert len(engines) == 2
    time.sleep(1.0)
    pressed = time.monotonic()
    page.locator('jp-button[data-command="notebook:interrupt-kernel"]').click()
    stopped = seconds_until_gone(engines, pressed, limit=30)
    wait_for(page, lambda s: not s["running"] and s["kernel"] == "idle", 30, "the cell to end")
    ended = time.monotonic() - pressed
    page.screenshot(path=os.path.join(screenshots, "interrupted.png"))
    assert stopped <= 5.0, f"every worker stopped {stopped:.1f} s after the interrupt"
    message = training.inner_text()
    assert "interrupted: training was stopped on every worker" in message, message
    # Then fresh workers start and get the earlier cells back before the cell ends: the
    # cell ends within 5 s of the click plus the restart its message reports.
    restart = float(re.search(r"restarted in ([0-9.]+) s", message).group(1))
    assert ended <= 5.0 + restart, f"the cell ended {ended:.1f} s after the interrupt"
    print(f"interrupt -> every worker stopped {stopped:.2f} s, cell ended {ended:.2f} s "
          f"(restart {restart:.1f} s)")
    # The next %%tfdist cell runs.
    page.evaluate("""() => {
        const panel = window.jupyterapp.shell.currentWidget;
        panel.content.model.sharedModel.insertCell(panel.content.model.cells.length,
            {cell_type: 'code', source: '%%tfdist\\ntfdist.rank * 10 + tfdist.world_size'});
        panel.content.activeCellIndex = panel.content.model.cells.length - 1;
    }""")
    page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-cell')")
    wait_for(page, lambda s: not s["running"] and not s["unrun"] and s["kernel"] == "idle", 60,
             "the next cell")
    assert "2" in cell_containing(page, "tfdist.rank * 10").locator(".jp-OutputArea").inner_text()


def test_restarting_the_kernel_from_the_menu_ends_the_whole_cluster(start_app, page,
                                                                      screenshots):
    server = start_app("lab")
    write_notebook(server.root_dir, "restart.ipynb", CELLS)
    open_notebook(page, server, "restart.ipynb")
    run_all(page)
    training_started(page, screenshots)
    cluster = [p for p in server.descendants() if p.pid != server.process.pid]
    engines = workers_running(server)
    assert len(engines) == 2
    page.locator(".lm-MenuBar-item", has_text="Kernel").click()
    page.locator(".lm-Menu-item", has_text="Restart Kernel…").first.click()
    page.screenshot(path=os.path.join(screenshots, "restart-dialog.png"))
    page.locator(".jp-Dialog-button", has_text="Restart").click()
    # The old kernel, its controller, engines and the network keeper: all gone in 20 s.
    _, alive = psutil.wait_procs(cluster, timeout=20)
    assert alive == [], [(p.pid, _cmdline(p)[:4]) for p in alive]
    wait_for(page, lambda s: s["kernel"] == "idle", 60, "the new kernel")
    assert state(page)["kernel"] == "idle"
