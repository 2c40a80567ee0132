"""This worker's rows of a shard set (`%%tfdist --shard`), put back into its namespace.

On the notebook's host the rows are views of the set's shared file, mapped copy-on-write:
pages are shared with the notebook's copy until this worker writes to one, and only its
own rows are ever touched. On another host they are read from the notebook's sender
straight into arrays of their own. See protocol/shard_layout.py for the recipes.
"""

from __future__ import annotations

import json
import mmap
import socket
from typing import Any

from ...protocol.shard_layout import ShardTicket, StreamSource

_CONNECT_SECONDS = 5.0
_READ_SECONDS = 120.0   # between two reads of the stream: a stalled sender fails the call
# name -> (id of the value delivered, this worker's rows of it); see live_rows
_held: dict[str, tuple[int, int]] = {}


def receive(ticket: ShardTicket) -> dict[str, Any]:
    """Build this worker's rows of every value of `ticket` into the user's namespace;
    returns {"rows": its rows, "bytes": bytes of its rows of the shared blocks, "via":
    "shared file" or "stream"}."""
    from IPython import get_ipython

    arrays = _mapped(ticket) if ticket.path else _streamed(ticket)
    namespace = get_ipython().user_ns
    for name, recipe in ticket.recipes.items():
        namespace[name] = build(recipe, arrays, ticket)
        if ticket.whole:   # pushed: held whole, as every worker holds it
            _held.pop(name, None)
        else:
            _held[name] = (id(namespace[name]), ticket.stop - ticket.start)
    return {"rows": ticket.stop - ticket.start,
            "bytes": sum(int(array.nbytes) for array in arrays),
            "via": "shared file" if ticket.path else "stream"}


def live_rows() -> dict[str, int]:
    """Rows of each shard this worker holds that its name still refers to (a cell that
    deleted or reassigned the name let go of it)."""
    from IPython import get_ipython

    shell = get_ipython()
    namespace = shell.user_ns if shell is not None else {}
    return {name: rows for name, (value_id, rows) in _held.items()
            if name in namespace and id(namespace[name]) == value_id}


def _mapped(ticket: ShardTicket) -> list:
    import numpy as np

    assert ticket.path is not None
    with open(ticket.path, "rb") as file:
        # MAP_PRIVATE: a write changes this worker's pages only; the views keep it open.
        memory = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_COPY)
    rows = ticket.stop - ticket.start
    return [np.ndarray((rows, *block.shape[1:]), np.dtype(block.dtype), memory,
                       block.offset + ticket.start * block.row_bytes)
            for block in ticket.blocks]


def _streamed(ticket: ShardTicket) -> list:
    import numpy as np

    assert ticket.stream is not None
    rows = ticket.stop - ticket.start
    arrays = [np.empty((rows, *block.shape[1:]), np.dtype(block.dtype))
              for block in ticket.blocks]
    with _connect(ticket.stream) as connection:
        request = {"token": ticket.stream.token, "start": ticket.start, "stop": ticket.stop}
        connection.sendall(json.dumps(request).encode() + b"\n")
        connection.settimeout(_READ_SECONDS)
        for array in arrays:
            _read_into(connection, array.reshape(-1).view(np.uint8).data)
    return arrays


def _connect(source: StreamSource) -> socket.socket:
    failures = []
    for address in source.addresses:
        try:
            return socket.create_connection((address, source.port), timeout=_CONNECT_SECONDS)
        except OSError as exc:
            failures.append(f"{address}: {exc}")
    raise ConnectionError(f"could not reach the notebook's data sender at port {source.port} "
                          f"({'; '.join(failures)})")


def _read_into(connection: socket.socket, buffer: memoryview) -> None:
    done = 0
    while done < len(buffer):
        got = connection.recv_into(buffer[done:])
        if got == 0:
            raise ConnectionError(f"the notebook's data sender stopped after {done} of "
                                  f"{len(buffer)} bytes")
        done += got


def build(recipe: Any, arrays: list, ticket: ShardTicket) -> Any:
    """The value a recipe describes, from this worker's rows."""
    kind = recipe[0]
    if kind == "block":
        return arrays[recipe[1]]
    if kind == "part":
        return ticket.parts[recipe[1]]
    if kind in ("tuple", "list"):
        items = [build(item, arrays, ticket) for item in recipe[1]]
        return tuple(items) if kind == "tuple" else items
    if kind == "dict":
        return {key: build(item, arrays, ticket) for key, item in zip(recipe[1], recipe[2])}
    import pandas as pd

    if kind == "range":
        _, start, step, name = recipe
        return pd.RangeIndex(start + ticket.start * step, start + ticket.stop * step, step,
                             name=name)
    if kind == "series":
        _, values, index, name = recipe
        return pd.Series(build(values, arrays, ticket), index=build(index, arrays, ticket),
                         name=name, copy=False)
    if kind == "frame":
        _, columns, parts, index = recipe
        # Numbered first: labels may repeat; `copy=False` keeps the columns as views.
        frame = pd.DataFrame({i: build(part, arrays, ticket) for i, part in enumerate(parts)},
                             index=build(index, arrays, ticket), copy=False)
        frame.columns = columns
        return frame
    raise ValueError(f"unknown shard recipe {kind!r}")
