"""First step on each engine: say where this worker can be reached, and which GPUs it
may share (gpus.py).

Runs before TensorFlow is imported; uses only the standard library.
"""

from __future__ import annotations

import os
import socket
import sys

from ...protocol.engine_standin import STANDIN_VARIABLE
from ..common import shared_strategy
from . import gpus


def reachable_address(controller_host: str) -> str:
    """The address of this host's interface that routes to the controller.

    Peers reach each other the way they reach the controller, so the interface
    used to reach it is the one to advertise. A UDP connect sends no packet.
    """
    if controller_host in ("", "0.0.0.0", "*"):
        controller_host = "127.0.0.1"
    try:
        family = socket.AF_INET6 if ":" in controller_host else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect((controller_host, 9))
            return probe.getsockname()[0]
    except OSError:
        return socket.gethostbyname(socket.gethostname())


def free_port(address: str) -> int:
    """A port that is free right now on this host.

    TF's server binds every interface, so the probe does too; the small window
    before TF binds it is the usual price of this handshake.
    """
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.bind(("", 0))
        return probe.getsockname()[1]


def current_tf_config() -> str | None:
    """TF_CONFIG of this engine if it already is a worker (MWMS cannot be rebuilt)."""
    if shared_strategy.shared_strategy() is None:
        return None
    return os.environ.get("TF_CONFIG")


def interface_address(name: str) -> str:
    """The IPv4 address of network interface `name` on this host (Linux)."""
    import fcntl
    import struct

    get_address = 0x8915  # SIOCGIFADDR
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            packed = fcntl.ioctl(probe.fileno(), get_address,
                                 struct.pack("256s", name[:15].encode()))
        except OSError as exc:
            raise OSError(f"no IPv4 address on interface {name!r} of {socket.gethostname()} "
                          f"({exc.strerror}); check the name with `ip addr`, or use "
                          "--address-map") from None
    return socket.inet_ntoa(packed[20:24])


def advertised_address(controller_host: str, interface: str | None = None,
                       address_map: dict[str, str] | None = None) -> str:
    """What the other workers should dial: the user's choice for this host, else the
    address of the interface that reaches the controller."""
    chosen = (address_map or {}).get(socket.gethostname())
    if chosen:
        return chosen
    if interface:
        return interface_address(interface)
    return reachable_address(controller_host)


# The job a batch system runs this engine in, by the variable it sets in its tasks.
_BATCH_JOBS = (("SLURM_JOB_ID", "Slurm job"), ("PBS_JOBID", "PBS job"), ("LSB_JOBID", "LSF job"))


def batch_job() -> str | None:
    """E.g. "Slurm job 12" when a batch system started this engine: failures name it,
    so the user knows which job to look at or cancel."""
    for variable, name in _BATCH_JOBS:
        if os.environ.get(variable):
            return f"{name} {os.environ[variable]}"
    return None


def own_controller_address() -> tuple[str, int] | None:
    """(host, port) this ipyparallel engine registered at over TCP, else None.

    It can differ from the notebook's view: a notebook on the controller's machine
    reaches it at 127.0.0.1, an engine on another host (a Slurm node, say) at the
    address in the controller's connection file.
    """
    app = sys.modules.get("ipyparallel.engine.app")
    if app is None or not app.IPEngine.initialized():
        return None
    proto, _, rest = str(getattr(app.IPEngine.instance(), "registration_url", "")).partition("://")
    host, _, port = rest.rpartition(":")
    if proto != "tcp" or not host or not port.isdigit():
        return None   # ipc:// (a private network): the notebook's view is the one to use
    return host.strip("[]"), int(port)


def describe_engine(controller_host: str, interface: str | None = None,
                    address_map: dict[str, str] | None = None,
                    gpus_per_worker: int | str = 0) -> dict:
    """Where this engine can be reached, and the GPUs it may share (looked for unless
    none are wanted; with a count given, a host whose GPUs cannot be listed is
    trusted as before)."""
    own = own_controller_address()
    address = advertised_address(own[0] if own else controller_host, interface, address_map)
    found: list[tuple[str, str]] = []
    if gpus_per_worker != 0:
        try:
            found = gpus.engine_gpus()
        except gpus.GpuProblem:
            if gpus_per_worker == "auto":
                raise
    worker_of = current_tf_config()
    return {
        "host": socket.gethostname(),
        "address": address,
        "port": free_port(address),
        "pid": os.getpid(),
        # The process its launcher started, when that is another (a fork server's stand-in).
        "launched_as": int(os.environ.get(STANDIN_VARIABLE) or 0) or None,
        "worker_of": worker_of,
        "batch_job": batch_job(),
        "gpus": found,
        "devices": os.environ.get("CUDA_VISIBLE_DEVICES") if worker_of else None,
    }
