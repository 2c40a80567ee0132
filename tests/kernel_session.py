"""A real IPython kernel driven the way a notebook front end drives it.

Each `execute` waits for the cell's reply under a deadline and returns what the
cell showed: stream text (with arrival times), errors, and display data.
"""

from __future__ import annotations

import os
import queue
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

from jupyter_client.manager import KernelManager


@dataclass
class CellOutput:
    status: str = ""
    stdout: str = ""
    stderr: str = ""
    error: dict | None = None
    results: list[dict] = field(default_factory=list)   # execute_result / display_data bundles
    updates: list[dict] = field(default_factory=list)   # update_display_data bundles
    stream_times: list[tuple[float, str, str]] = field(default_factory=list)

    @property
    def error_text(self) -> str:
        if not self.error:
            return ""
        return ("\n".join(self.error.get("traceback", []))
                + f"\n{self.error['ename']}: {self.error['evalue']}")


class KernelSession:
    def __init__(self, env: dict[str, str] | None = None, cwd: str | None = None):
        self.km = KernelManager(kernel_name="python3")
        # Use this interpreter, not whatever kernelspec the machine has.
        self.km.kernel_cmd = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
        kernel_env = dict(os.environ)
        kernel_env.update(env or {})
        self.km.start_kernel(env=kernel_env, cwd=cwd)
        self.client = self.km.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=60)

    def execute(self, code: str, timeout: float = 120.0, on_output=None) -> CellOutput:
        msg_id = self.client.execute(code)
        out = CellOutput()
        deadline = time.monotonic() + timeout
        idle = False
        while not idle:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"cell did not finish within {timeout} s:\n{code}\n"
                                   f"stdout so far:\n{out.stdout}\nstderr so far:\n{out.stderr}")
            try:
                msg = self.client.get_iopub_msg(timeout=min(remaining, 1.0))
            except queue.Empty:
                continue
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                setattr(out, content["name"], getattr(out, content["name"]) + content["text"])
                out.stream_times.append((time.time(), content["name"], content["text"]))
                if on_output is not None:
                    on_output(content["name"], content["text"])
            elif kind == "error":
                out.error = content
            elif kind in ("execute_result", "display_data"):
                out.results.append(content["data"])
            elif kind == "update_display_data":
                out.updates.append(content["data"])
            elif kind == "status" and content["execution_state"] == "idle":
                idle = True
        out.status = self._reply_to(msg_id, deadline)["content"]["status"]
        return out

    def _reply_to(self, msg_id: str, deadline: float) -> dict:
        """The shell reply to `msg_id`. Other replies are skipped: a kernel slow to start
        answers every kernel_info request `wait_for_ready` re-sent, and reading those as
        a cell's reply would shift every later cell's status by one."""
        while True:
            reply = self.client.get_shell_msg(timeout=max(1.0, deadline - time.monotonic()))
            if reply["parent_header"].get("msg_id") == msg_id:
                return reply

    def ok(self, code: str, timeout: float = 120.0) -> CellOutput:
        """Execute and insist that the cell succeeded."""
        out = self.execute(code, timeout=timeout)
        assert out.status == "ok", f"cell failed:\n{code}\n{out.error_text}\nstderr:\n{out.stderr}"
        return out

    def interrupt(self) -> None:
        self.km.interrupt_kernel()

    def kernel_pid(self) -> int:
        return self.km.provisioner.process.pid

    def shutdown(self) -> None:
        try:
            self.client.stop_channels()
        finally:
            self.km.shutdown_kernel(now=False)


@contextmanager
def kernel_with_extension(cwd: str):
    """A kernel in `cwd` with the magics loaded, for a cluster the test attaches to;
    `%tfdist stop` and shut down afterwards. `session.cwd` is `cwd`."""
    session = KernelSession(cwd=cwd)
    session.cwd = cwd
    try:
        session.ok("%load_ext tfmw_notebook", timeout=60)
        yield session
        session.execute("%tfdist stop", timeout=60)
    finally:
        session.shutdown()


@contextmanager
def kernel_with_cluster(cwd: str, workers: int = 2, flags: str = ""):
    """A kernel in `cwd` (fit() saves checkpoints there) with a started cluster
    (`flags`: more options of `%tfdist start`); stopped and shut down afterwards.
    `session.cwd` is `cwd`."""
    session = KernelSession(cwd=cwd)
    session.cwd = cwd
    try:
        session.ok("%load_ext tfmw_notebook", timeout=60)
        session.start_line = session.ok(f"%tfdist start -n {workers} {flags}",
                                        timeout=180).stdout
        yield session
        session.execute("%tfdist stop", timeout=60)
    finally:
        session.shutdown()


def per_worker(kernel, name):
    """`name` from each rank, read through the Python API inside the kernel."""
    import json

    out = kernel.ok(
        "import json as _json\n"
        "from tfmw_notebook.magics.session import active_cluster as _active\n"
        f"print(_json.dumps([_active().pull([{name!r}], rank=r)[{name!r}] "
        "for r in range(_active().size)]))"
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def agreed_json(kernel, name):
    """The JSON text in `name` on every rank, parsed; every worker must hold the same."""
    import json

    workers = per_worker(kernel, name)
    assert all(w == workers[0] for w in workers), workers
    value = workers[0]
    return {k: json.loads(v) for k, v in value.items()} if isinstance(value, dict) \
        else json.loads(value)
