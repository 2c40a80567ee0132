"""`%tfdist tensorboard`: the run's TensorBoard logs, shown inline.

TensorBoard's own notebook support does the work: `tensorboard.manager` starts
(or reuses) a server for a log directory and `tensorboard.notebook.display` shows
it in an iframe. What this adds: the server belongs to the cluster's session, so
`%tfdist stop` ends the one it started (a server it found running is left alone).
TensorBoard serves on localhost only, as it does by default.
"""

from __future__ import annotations

import datetime
import os
import signal
import sys
import time

from ..errors import BadArgument, TFDistError

DEFAULT_HEIGHT = 800
START_TIMEOUT = 60.0


class TensorBoardError(TFDistError):
    """TensorBoard is missing or its server did not come up."""


class TensorBoardView:
    """A running TensorBoard, displayed inline where it is the cell's result."""

    def __init__(self, logdir: str, port: int, pid: int, *, started: bool,
                 height: int = DEFAULT_HEIGHT):
        self.logdir, self.port, self.pid = logdir, port, pid
        self.started = started    # we started it (else an earlier server was reused)
        self.height = height

    @property
    def url(self) -> str:
        return f"http://localhost:{self.port}/"

    def _ipython_display_(self):
        from tensorboard import notebook

        notebook.display(port=self.port, height=self.height)

    def __repr__(self) -> str:
        return f"TensorBoard at {self.url} (logs: {self.logdir})"

    def stop(self, timeout: float = 10.0) -> None:
        """End the server if we started it; TERM first, KILL if it lingers."""
        if not self.started or not _alive(self.pid):
            return
        os.kill(self.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while _alive(self.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if _alive(self.pid):
            os.kill(self.pid, signal.SIGKILL)


def logdir_for(asked: str | None, known: list[str], *, cwd: str) -> str:
    """The directory to show: the one asked for, else the one (or the common parent
    of the several) that this session's TensorBoard callbacks wrote to."""
    if asked:
        logdir = os.path.abspath(os.path.join(cwd, os.path.expanduser(asked)))
    elif known:
        logdir = known[0] if len(set(known)) == 1 else os.path.commonpath(known)
    else:
        raise BadArgument("no TensorBoard logs yet: train in a `%%tfdist --tensorboard` cell "
                          "(or with a TensorBoard callback), or name the directory: "
                          "`%tfdist tensorboard DIR`")
    if not os.path.isdir(logdir):
        raise BadArgument(f"no TensorBoard logs in {logdir}: it is not a directory; check "
                          "the path, or train with `%%tfdist --tensorboard` first")
    return logdir


def shown(current: TensorBoardView | None, logdir: str, *,
          height: int = DEFAULT_HEIGHT) -> TensorBoardView:
    """The server for `logdir`: `current` if it serves those logs and still runs, else a
    new one (`current`, when it was ours, is stopped)."""
    if current is not None:
        if current.logdir == logdir and _alive(current.pid):
            current.height = height
            return current
        current.stop()
    return start(logdir, height=height)


def start(logdir: str, *, height: int = DEFAULT_HEIGHT) -> TensorBoardView:
    """A TensorBoard server for `logdir` (started, or a running one for the same logs)."""
    try:
        from tensorboard import manager
    except ImportError:
        raise TensorBoardError("TensorBoard is not installed in the notebook's Python: "
                               "`pip install tensorboard` (the [tensorflow] extra brings "
                               "it)") from None
    _use_this_pythons_tensorboard()
    result = manager.start(["--logdir", logdir],
                           timeout=datetime.timedelta(seconds=START_TIMEOUT))
    if isinstance(result, manager.StartLaunched):
        return TensorBoardView(logdir, result.info.port, result.info.pid, started=True,
                               height=height)
    if isinstance(result, manager.StartReused):
        return TensorBoardView(logdir, result.info.port, result.info.pid, started=False,
                               height=height)
    if isinstance(result, manager.StartFailed):
        detail = (result.stderr or result.stdout or "").strip().splitlines()
        raise TensorBoardError(f"TensorBoard exited with code {result.exit_code}"
                               + (f": {detail[-1]}" if detail else ""))
    if isinstance(result, manager.StartTimedOut):
        os.kill(result.pid, signal.SIGKILL)
        raise TensorBoardError(f"TensorBoard did not answer within {START_TIMEOUT:.0f} s")
    raise TensorBoardError(f"TensorBoard could not be started: {result}")


def _use_this_pythons_tensorboard() -> None:
    # The manager runs `tensorboard` from PATH, which may not hold the kernel's
    # environment (a venv kernel started by its full path).
    if "TENSORBOARD_BINARY" not in os.environ:
        here = os.path.join(os.path.dirname(sys.executable), "tensorboard")
        if os.path.exists(here):
            os.environ["TENSORBOARD_BINARY"] = here


def _alive(pid: int) -> bool:
    try:
        finished, _ = os.waitpid(pid, os.WNOHANG)   # our child: reap it
        if finished:
            return False
    except ChildProcessError:
        pass                                     # not our child
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
