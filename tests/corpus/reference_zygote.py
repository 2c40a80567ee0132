"""One-process reference runs forked from a process that has imported TensorFlow once:
`python -m corpus.reference_zygote`, one per Keras mode (the mode is read at import).

Each corpus program's reference would otherwise start a Python that imports TensorFlow,
Keras, pandas and IPython again (~8 CPU-s on 2 cores, beside the workers). Nothing here
starts TensorFlow's runtime, threads that hold locks, or an event loop before a fork, so
each child begins as a fresh process would, with the program's own modules still to run.

Protocol: the zygote says "ready" once it has imported; then a JSON line per run on stdin
({"spec", "cwd", "stdout", "stderr", "env"}), answered "pid N" once the child runs and
"exit CODE" when it ended, one run at a time. EOF ends it.
`Zygote` is the test's side: it starts one and hands out `ForkedRun`s, which wait and
kill as the `subprocess.Popen` of a fresh reference process would.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
import traceback

# What the programs import at their start; imported here once, before any fork.
WARM_MODULES = ("tensorflow", "keras", "numpy", "pandas", "matplotlib.pyplot",
                "IPython.core.interactiveshell")


def _warm_up() -> None:
    os.environ.setdefault("MPLBACKEND", "Agg")
    for name in WARM_MODULES:
        __import__(name)
    if os.environ.get("TF_USE_LEGACY_KERAS") == "1":
        __import__("tf_keras")


def _run_child(request: dict) -> None:
    """In the child: the request's directory, output files and environment, then the
    reference run (corpus.one_process, which reports a program's own errors itself);
    never returns."""
    try:
        os.chdir(request["cwd"])
        null = os.open(os.devnull, os.O_RDONLY)   # the zygote's requests are not the child's
        os.dup2(null, 0)
        os.close(null)
        for target, path in ((1, request["stdout"]), (2, request["stderr"])):
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(descriptor, target)
            os.close(descriptor)
        os.environ.update(request["env"])
        tempfile.tempdir = None          # TMPDIR is read again, as at a process's start
        sys.argv = ["corpus.one_process", request["spec"]]
        from corpus import one_process

        one_process.main()
    except BaseException:
        traceback.print_exc()
        _leave(1)
    _leave(0)


def _leave(code: int) -> None:
    """End the child now: what it printed is flushed, the zygote's exit handlers are not run."""
    with contextlib.suppress(BaseException):
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


def serve() -> None:
    _warm_up()
    print("ready", flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _run_child(request)
        print(f"pid {pid}", flush=True)
        _, status = os.waitpid(pid, 0)
        print(f"exit {os.waitstatus_to_exitcode(status)}", flush=True)


class Zygote:
    """A zygote (the test's side), importing from its start on; `run` forks a reference
    from it, or queues the request while the imports go on: nothing here waits for them."""

    def __init__(self, env: dict[str, str], log: str):
        with open(log, "w") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "corpus.reference_zygote"], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=stderr, env=env)
        self._log = log
        self._pending = b""
        self._ready = False

    def run(self, spec: str, cwd: str, stdout: str, stderr: str,
            env: dict[str, str]) -> ForkedRun:
        request = {"spec": spec, "cwd": cwd, "stdout": stdout, "stderr": stderr, "env": env}
        self.process.stdin.write((json.dumps(request) + "\n").encode())
        self.process.stdin.flush()
        return ForkedRun(self, ["corpus.one_process", spec])

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=30)

    def expect(self, word: str, deadline: float) -> str | None:
        """The rest of the zygote's next line (after its "ready"), which must start with
        `word`; None at the deadline."""
        line = self._line(deadline)
        if line == "ready" and not self._ready:
            self._ready = True
            line = self._line(deadline)
        if line is None:
            return None
        if not line.startswith(word):
            raise RuntimeError(f"the reference zygote said {line!r}, not {word!r}; its log: "
                               f"{self._log}")
        return line[len(word):].strip()

    def _line(self, deadline: float) -> str | None:
        """The next line, or None at the deadline."""
        descriptor = self.process.stdout.fileno()
        while b"\n" not in self._pending:
            remaining = max(0.0, deadline - time.monotonic())
            if not select.select([descriptor], [], [], remaining)[0]:
                return None
            chunk = os.read(descriptor, 4096)
            if not chunk:
                raise RuntimeError(f"the reference zygote ended (code {self.process.wait()}); "
                                   f"its log: {self._log}")
            self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        return line.decode()


class ForkedRun:
    """One forked reference, waited for and killed as a `subprocess.Popen`."""

    def __init__(self, zygote: Zygote, args: list[str]):
        self._zygote, self.args = zygote, args
        self.pid: int | None = None
        self.returncode: int | None = None

    def wait(self, timeout: float | None = None) -> int:
        deadline = time.monotonic() + (timeout if timeout is not None else 1e9)
        if self.returncode is None:
            if self.pid is None:
                self._take_pid(deadline, timeout)
            code = self._zygote.expect("exit", deadline)
            if code is None:
                raise subprocess.TimeoutExpired(self.args, timeout)
            self.returncode = int(code)
        return self.returncode

    def poll(self) -> int | None:
        try:
            return self.wait(0)
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        if self.returncode is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                if self.pid is None:   # still importing: the fork is a minute away at most
                    self._take_pid(time.monotonic() + 60, 60)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid, signal.SIGKILL)
                self.wait(30)   # its "exit" line, which the next run must not read

    def _take_pid(self, deadline: float, timeout: float | None) -> None:
        pid = self._zygote.expect("pid", deadline)
        if pid is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        self.pid = int(pid)


if __name__ == "__main__":
    serve()
