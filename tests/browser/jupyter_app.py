"""A JupyterLab 4 or Notebook 7 server started for one test, and Chromium driving it.

The server runs on a free local port with a random token, in a copy of the notebooks,
with the app exposed to the page (`window.jupyterapp`) so a test can wait for what the
app knows (the kernel is idle) instead of guessing from the DOM. Everything it starts
(the server, the kernels below it, their clusters) is stopped by pid at the end.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import psutil

START_SECONDS = 90.0


def chromium_path() -> str | None:
    """Debian's Chromium (Playwright's own browser download is out of reach here)."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class JupyterApp:
    """`app` is "lab" (JupyterLab 4) or "notebook" (Notebook 7)."""

    def __init__(self, app: str, root_dir: str, env: dict[str, str] | None = None):
        self.app = app
        self.root_dir = root_dir
        self.port = free_port()
        self.token = secrets.token_hex(16)
        module = {"lab": "jupyterlab", "notebook": "notebook"}[app]
        command = [sys.executable, "-m", module, "--no-browser", f"--port={self.port}",
                   "--ip=127.0.0.1", f"--IdentityProvider.token={self.token}",
                   f"--ServerApp.root_dir={root_dir}", "--ServerApp.open_browser=False",
                   "--LabServerApp.expose_app_in_browser=True" if app == "lab" else
                   "--JupyterNotebookApp.expose_app_in_browser=True",
                   # No news, no update checks, no announcements popping over the page.
                   "--LabApp.news_url=", "--LabApp.check_for_updates_class="
                   "jupyterlab.NeverCheckForUpdate"]
        if app == "notebook":
            command = command[:-2]
        if os.geteuid() == 0:
            command.append("--allow-root")
        self.log_path = os.path.join(root_dir, f".{app}-server.log")
        self._log = open(self.log_path, "w")
        self.process = subprocess.Popen(command, cwd=root_dir, env={**os.environ, **(env or {})},
                                        stdout=self._log, stderr=subprocess.STDOUT,
                                        start_new_session=True)
        self._wait_until_up()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path}?token={self.token}"

    def _wait_until_up(self) -> None:
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.app} server exited: {self.log()}")
            try:
                with urllib.request.urlopen(self.url("api/status"), timeout=2):
                    return
            except OSError:
                time.sleep(0.3)
        raise TimeoutError(f"{self.app} server did not answer in {START_SECONDS:g} s: {self.log()}")

    def log(self) -> str:
        with open(self.log_path) as log:
            return log.read()[-4000:]

    def descendants(self) -> list[psutil.Process]:
        try:
            return psutil.Process(self.process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def stop(self) -> None:
        """Stop the server and every process below it, by pid, within a deadline."""
        processes = self.descendants()
        try:
            processes.insert(0, psutil.Process(self.process.pid))
        except psutil.NoSuchProcess:
            pass
        for process in processes:
            try:
                process.send_signal(signal.SIGTERM)
            except psutil.NoSuchProcess:
                pass
        _, alive = psutil.wait_procs(processes, timeout=15)
        for process in alive:
            try:
                process.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(alive, timeout=10)
        self.process.wait(timeout=10)
        self._log.close()


def copy_notebooks(source: str, target: str) -> str:
    """The tutorials in a directory of their own (runs write checkpoints beside them)."""
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("tfdist_checkpoints",
                                                                   ".ipynb_checkpoints"))
    return target
