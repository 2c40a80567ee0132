"""What a set of processes listens on, seen the way another machine would see it.

Linux shows each process's sockets in /proc/<pid>/net/tcp{,6} of the network
namespace the process is in, and which of them are its own through the socket
inodes behind /proc/<pid>/fd. A listening socket is reachable from the network
when it is in this machine's own namespace on a non-loopback address, or in a
namespace that has an interface besides the loopback.
"""

from __future__ import annotations

import ipaddress
import os
import socket

LISTEN = "0A"


def netns(pid: int | str) -> str:
    return os.readlink(f"/proc/{pid}/ns/net")


def interfaces(pid: int | str) -> list[str]:
    with open(f"/proc/{pid}/net/dev") as table:
        return [line.split(":", 1)[0].strip() for line in table.readlines()[2:]]


def _socket_inodes(pid: int | str) -> set[str]:
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def _address(hex_address: str) -> tuple[str, int]:
    host, port = hex_address.split(":")
    raw = bytes.fromhex(host)
    if len(raw) == 4:
        ip = socket.inet_ntop(socket.AF_INET, raw[::-1])
    else:   # four little-endian 32-bit words
        ip = socket.inet_ntop(socket.AF_INET6,
                              b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4)))
    return ip, int(port, 16)


def listening(pid: int | str) -> list[tuple[str, int]]:
    """(address, port) of every TCP socket `pid` holds that listens."""
    mine = _socket_inodes(pid)
    found = []
    for table in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{table}") as rows:
                lines = rows.readlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == LISTEN and fields[9] in mine:
                found.append(_address(fields[1]))
    return found


def exposed(pids: list[int]) -> list[str]:
    """Every listening socket of `pids` that another machine could reach, described."""
    ours = netns("self")
    found = []
    for pid in pids:
        try:
            sockets = listening(pid)
            namespace, names = netns(pid), interfaces(pid)
        except (FileNotFoundError, ProcessLookupError):
            continue   # ended meanwhile
        for address, port in sockets:
            if namespace == ours and not ipaddress.ip_address(address).is_loopback:
                found.append(f"pid {pid} listens on {address}:{port} in this machine's network")
            elif namespace != ours and names != ["lo"]:
                found.append(f"pid {pid} listens on {address}:{port} in a namespace with "
                             f"interfaces {names}")
    return found


def outside_addresses() -> list[str]:
    """This machine's IPv4 addresses other than loopback (what a neighbour dials)."""
    import psutil

    return [a.address for addrs in psutil.net_if_addrs().values() for a in addrs
            if a.family == socket.AF_INET and not a.address.startswith("127.")]


def accepts(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=2):
            return True
    except OSError:
        return False
