"""The fork server of a cluster `%tfdist start` launches: TensorFlow and an engine's code
imported once, then a ready engine forked for each stand-in that asks
(protocol/engine_standin.py: why, and the stand-in's side).

It runs as the engines would (same command prefix, so inside their private network, and
same environment), and ends with the kernel that launched it (orphan guard). Its engines
do not watch it: each ends with its stand-in, which watches the kernel. The
listening socket is made by the notebook and inherited (its descriptor is argv[1]), so a
stand-in that starts first finds it already listening: its request waits in the backlog
while TensorFlow is imported.

Forking is safe here because nothing has started that a child would miss: TensorFlow's
import loads no CUDA driver and creates no session or gRPC server; no zmq context, event
loop or kernel exists yet. Each child builds its own at its start, as an engine launched
afresh does. The server's own threads (the import's, the orphan guard's) hold no lock
across the fork: the import has finished before the first fork.

Python's cyclic collector is off in the server, and every object it holds is frozen (moved
out of the collector's reach, `gc.freeze`) before each fork, as Python's documentation
advises for a process that forks without exec: a full collection walks every object it
tracks and writes to each, which in a forked child copies the page it lies on. Measured
(2 workers, TensorFlow 2.21): one engine of each start ran a full collection during its
bootstrap, 0.2 s of CPU to free 10 objects, most of it copying pages; and the server's
import itself ran five, 0.4 s of CPU in all, freeing none to 445 objects each.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import os
import select
import signal
import socket
import sys
import threading
import traceback

from ...protocol import orphan_guard
from ...protocol.engine_standin import STANDIN_VARIABLE, decode_request
from . import deferred_imports
from .kernel_imports import import_kernel_without_debugger

# What TensorFlow, Keras, CUDA and the interpreter read while they are imported: a stand-in
# whose environment differs here is refused (it starts its engine itself).
IMPORT_TIME_PREFIXES = ("TF_", "TENSORFLOW", "KERAS", "CUDA", "XLA_", "PYTHON", "LD_",
                        "OMP_", "MKL", "OPENBLAS", "GRPC_", "NVIDIA_")
_REQUEST_SECONDS = 5.0   # a stand-in sends its request at once; a silent one is dropped
_REQUEST_LIMIT = 1 << 22
_SERVER_CWD = os.getcwd()   # what `python -m` put first on sys.path here


def import_time_difference(ours: dict[str, str], theirs: dict[str, str]) -> list[str]:
    """The variables read at import whose values differ between two environments."""
    names = {name for name in (*ours, *theirs) if name.startswith(IMPORT_TIME_PREFIXES)}
    return sorted(name for name in names if ours.get(name) != theirs.get(name))


class ForkServer:
    """Accepts stand-ins, forks their engines, and tells each how its engine ended."""

    def __init__(self, listener: socket.socket):
        self.listener = listener
        self.engines: dict[int, socket.socket] = {}   # engine pid -> its stand-in
        self._wake_read, wake_write = os.pipe()
        os.set_blocking(self._wake_read, False)
        os.set_blocking(wake_write, False)
        self._wake_write = wake_write
        self._environment = dict(os.environ)

    def serve(self) -> None:
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)
        signal.set_wakeup_fd(self._wake_write)
        while True:
            ready, _, _ = select.select([self.listener.fileno(), self._wake_read], [], [])
            if self._wake_read in ready:
                with contextlib.suppress(BlockingIOError):
                    while os.read(self._wake_read, 512):
                        pass
                self._reap()
            if self.listener.fileno() in ready:
                connection, _ = self.listener.accept()
                self._answer(connection)

    def _answer(self, connection: socket.socket) -> None:
        try:
            request, streams = _receive(connection)
        except (OSError, ValueError) as exc:
            print(f"tfmw fork server: a bad request ({exc!r})", file=sys.stderr, flush=True)
            connection.close()
            return
        differ = import_time_difference(self._environment, request["env"])
        if differ:
            _send(connection, f"refused: the fork server was started with other values of "
                              f"{', '.join(differ)}")
            _close_all(streams)
            connection.close()
            return
        sys.stdout.flush()
        sys.stderr.flush()
        gc.freeze()   # what the child shares with this process stays out of its collections
        pid = os.fork()
        if pid == 0:
            self._become_engine(connection, streams, request)
        _close_all(streams)
        if _send(connection, f"pid {pid}"):
            self.engines[pid] = connection
        else:   # the stand-in gave up waiting: its engine must not live on alone
            os.kill(pid, signal.SIGKILL)
            connection.close()

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            connection = self.engines.pop(pid, None)
            if connection is not None:
                _send(connection, f"exit {os.waitstatus_to_exitcode(status)}")
                connection.close()

    def _become_engine(self, connection: socket.socket, streams: list[int],
                       request: dict) -> None:
        """In the child: take the stand-in's streams, environment, directory and arguments,
        then run the engine; never returns."""
        code = 1
        try:
            gc.enable()   # off in the server only
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            self.listener.close()
            for other in self.engines.values():
                other.close()
            os.close(self._wake_read)
            os.close(self._wake_write)
            for target, stream in enumerate(streams):
                os.dup2(stream, target)
            _close_all(streams)
            _take_environment(request)
            _reseed()
            _end_with_standin(connection)
            from . import engine_main

            engine_main.run()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:
            traceback.print_exc()
        finally:
            with contextlib.suppress(BaseException):
                atexit._run_exitfuncs()
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(code)


def _receive(connection: socket.socket) -> tuple[dict, list[int]]:
    connection.settimeout(_REQUEST_SECONDS)
    data, streams, _, _ = socket.recv_fds(connection, 65536, 3)
    try:
        request = decode_request(data)
        while request is None:
            chunk = connection.recv(65536)
            if not chunk or len(data) > _REQUEST_LIMIT:
                raise ValueError("the request ended early")
            data += chunk
            request = decode_request(data)
        if len(streams) != 3:
            raise ValueError(f"{len(streams)} streams came with the request, not 3")
    except BaseException:
        _close_all(streams)
        raise
    connection.settimeout(None)
    return request, streams


def _send(connection: socket.socket, line: str) -> bool:
    try:
        connection.sendall(line.encode() + b"\n")
        return True
    except OSError:
        return False


def _close_all(descriptors: list[int]) -> None:
    for descriptor in descriptors:
        with contextlib.suppress(OSError):
            os.close(descriptor)


def _take_environment(request: dict) -> None:
    os.environ.clear()
    os.environ.update(request["env"])
    os.environ[STANDIN_VARIABLE] = str(request["pid"])
    # Read by the stand-in, which watches the kernel for this engine (a process this one
    # starts must not take that kernel for its own launcher).
    os.environ.pop(orphan_guard.LAUNCHER_VARIABLE, None)
    os.chdir(request["cwd"])
    # `python -m` put the server's working directory first on the path: the stand-in's
    # belongs there (where a plain engine would find the user's modules).
    if sys.path and sys.path[0] == _SERVER_CWD:
        sys.path[0] = os.getcwd()
    sys.argv = [sys.argv[0], *request["argv"]]


def _reseed() -> None:
    """Children of one fork share the server's random state; engines launched afresh
    each seeded their own. Python's `random` reseeds itself at a fork; NumPy's does not."""
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()


def _end_with_standin(connection: socket.socket) -> None:
    """Kill this engine when its stand-in is gone (it sends nothing more, so the end of the
    connection is its end): the launcher's SIGKILL of the stand-in ends the engine too."""
    def watch() -> None:
        with contextlib.suppress(OSError):
            while connection.recv(1):
                pass
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="tfmw-standin-watch", daemon=True).start()


def _import_engine_code() -> None:
    """TensorFlow (in a thread: it overlaps the kernel's imports) and the engine's code."""
    def import_tensorflow() -> None:
        # Any failure is left to each engine's bootstrap: it imports again and says why.
        with contextlib.suppress(BaseException):
            import tensorflow  # noqa: F401

    deferred_imports.install()
    importer = threading.Thread(target=import_tensorflow, name="tfmw-preimport")
    importer.start()
    import_kernel_without_debugger()
    import ipyparallel.engine.app  # noqa: F401
    importer.join()



def main(argv: list[str]) -> None:
    gc.disable()   # see the module's docstring
    orphan_guard.start()
    listener = socket.socket(fileno=int(argv[0]))
    _import_engine_code()
    ForkServer(listener).serve()


if __name__ == "__main__":
    main(sys.argv[1:])
