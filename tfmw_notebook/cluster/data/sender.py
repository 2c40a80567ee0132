"""The notebook's data sender: rows of a shared file streamed straight to workers on other
hosts, not through the ipyparallel controller (which would pickle and forward them).

One sender per delivery: it listens on every interface, answers requests that carry the
set's token (each names a worker's row range), and sends those rows of every block in
order. It stops when the delivery ends.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import secrets
import socket
import threading
from collections.abc import Callable

from ...protocol.shard_layout import SharedBlock, StreamSource

_REQUEST_BYTES = 4096
_SEND_SECONDS = 120.0   # a worker that stops reading fails its delivery, not the notebook
_PIECE = 1 << 22        # bytes per send: progress is counted in these


class Sender:
    """Serves the rows of `path`'s blocks to workers that bring `token`."""

    def __init__(self, path: str, blocks: tuple[SharedBlock, ...],
                 on_sent: Callable[[int], None] | None = None):
        self._path, self._blocks = path, blocks
        self._on_sent = on_sent or (lambda nbytes: None)
        self.token = secrets.token_hex(16)
        self._listener = socket.create_server(("", 0), family=socket.AF_INET6,
                                              dualstack_ipv6=True) \
            if socket.has_dualstack_ipv6() else socket.create_server(("", 0))
        self._listener.settimeout(0.5)
        self._stopping = threading.Event()
        self.errors: list[str] = []
        self._thread = threading.Thread(target=self._serve, name="tfmw-data-sender",
                                        daemon=True)
        self._thread.start()

    def source(self, addresses: tuple[str, ...]) -> StreamSource:
        return StreamSource(addresses, self._listener.getsockname()[1], self.token)

    def close(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=5)
        self._listener.close()

    def _serve(self) -> None:
        workers = []
        while not self._stopping.is_set():
            try:
                connection, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                break
            thread = threading.Thread(target=self._answer, args=(connection,), daemon=True)
            thread.start()
            workers.append(thread)
        for thread in workers:
            thread.join(timeout=_SEND_SECONDS)

    def _answer(self, connection: socket.socket) -> None:
        with connection, open(self._path, "rb") as file, \
                mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as memory:
            try:
                connection.settimeout(_SEND_SECONDS)
                request = json.loads(_read_line(connection))
                if not secrets.compare_digest(str(request.get("token")), self.token):
                    return
                start, stop = int(request["start"]), int(request["stop"])
                for block in self._blocks:
                    first = block.offset + start * block.row_bytes
                    self._send(connection, memory, first, first + (stop - start) * block.row_bytes)
            except (OSError, ValueError, KeyError) as exc:
                self.errors.append(f"{type(exc).__name__}: {exc}")

    def _send(self, connection: socket.socket, memory: mmap.mmap, first: int, end: int) -> None:
        with memoryview(memory) as view:
            for begin in range(first, end, _PIECE):
                piece = view[begin:min(end, begin + _PIECE)]
                connection.sendall(piece)
                self._on_sent(len(piece))
                piece.release()


def _read_line(connection: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"\n") and len(data) < _REQUEST_BYTES:
        chunk = connection.recv(_REQUEST_BYTES - len(data))
        if not chunk:
            break
        data += chunk
    return data


def local_addresses() -> tuple[str, ...]:
    """This host's addresses other hosts may reach it at (loopback last)."""
    found: list[str] = []
    with contextlib.suppress(OSError):
        for info in socket.getaddrinfo(socket.gethostname(), None, type=socket.SOCK_STREAM):
            address = str(info[4][0])
            if address not in found:
                found.append(address)
    found.sort(key=lambda address: address.startswith("127.") or address == "::1")
    return tuple(found)
