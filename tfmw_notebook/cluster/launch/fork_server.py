"""The fork server a cluster's engines come from (worker/boot/engine_forkserver.py), seen from
the notebook: started with the cluster, as its engines would be (same command prefix and
environment), replaced when their network or environment changes, ended with it.

Measured before it (2 workers on this 2-core machine): every engine start and restart
imported TensorFlow afresh, ~5 CPU-s each (3.2-3.8 s of it `import tensorflow`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile

from ...protocol import engine_standin, worker_modules

_log = logging.getLogger("tfmw_notebook")
# The engine command while a fork server runs: the stand-in, by path and isolated, so it
# imports nothing of this package (nor sees its directory's modules on the path).
STANDIN_COMMAND = [sys.executable, "-I", engine_standin.__file__]
_SERVER_MODULE = worker_modules.FORK_SERVER
# Set to 1 in the notebook's environment: every engine imports TensorFlow itself, as before
# the fork server (for a library that misbehaves in a forked process).
OFF_VARIABLE = "TFMW_NO_FORK_SERVER"
_BACKLOG = 256   # stand-ins queue here while the server imports TensorFlow
_STOP_SECONDS = 2.0


class ForkServer:
    """One fork server process and the socket its stand-ins reach it at."""

    def __init__(self, process: subprocess.Popen, socket_dir: str, environment: dict[str, str]):
        self.process = process
        self.environment = environment   # what it was started with (beyond ours)
        self._socket_dir = socket_dir

    @property
    def path(self) -> str:
        return os.path.join(self._socket_dir, "forks")

    @classmethod
    def start(cls, environment: dict[str, str], prefix: list[str],
              log_file: str) -> ForkServer | None:
        """A fork server with `environment` (added to ours), run after `prefix`; None if it
        cannot be started or is turned off (the engines then start themselves, as before)."""
        if os.environ.get(OFF_VARIABLE) == "1":
            return None
        socket_dir = tempfile.mkdtemp(prefix="tfmw-forks-")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(os.path.join(socket_dir, "forks"))
            listener.listen(_BACKLOG)
            with open(log_file, "ab") as log, open(os.devnull, "rb") as nothing:
                process = subprocess.Popen(
                    [*prefix, sys.executable, "-m", _SERVER_MODULE, str(listener.fileno())],
                    env={**os.environ, **environment}, pass_fds=[listener.fileno()],
                    stdin=nothing, stdout=log, stderr=subprocess.STDOUT,
                    start_new_session=True)   # the notebook's interrupt is not for it
        except OSError as exc:
            _log.warning("no fork server for the engines (%r): each imports TensorFlow", exc)
            shutil.rmtree(socket_dir, ignore_errors=True)
            return None
        finally:
            listener.close()
        return cls(process, socket_dir, dict(environment))

    def engine_environment(self) -> dict[str, str]:
        """What the engines' launch environment needs to reach this server."""
        return {engine_standin.SOCKET_VARIABLE: self.path}

    def is_running(self) -> bool:
        return self.process.poll() is None

    def close(self) -> None:
        """End the server; engines it forked end too (their orphan guard watches it)."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(_STOP_SECONDS)
            except subprocess.TimeoutExpired:
                self.process.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.process.wait(_STOP_SECONDS)
        shutil.rmtree(self._socket_dir, ignore_errors=True)
