"""First step on each engine: say where this worker can be reached.

Runs before TensorFlow is imported; uses only the standard library.
"""

from __future__ import annotations

import os
import socket
import sys


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
    shared = sys.modules.get("tfmw_notebook.worker.shared_strategy")
    if shared is None or shared.shared_strategy() is None:
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


def describe_engine(controller_host: str, interface: str | None = None,
                    address_map: dict[str, str] | None = None) -> dict:
    address = advertised_address(controller_host, interface, address_map)
    return {
        "host": socket.gethostname(),
        "address": address,
        "port": free_port(address),
        "pid": os.getpid(),
        "worker_of": current_tf_config(),
    }
