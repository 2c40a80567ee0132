"""How a shard set reaches its workers: what both sides agree on (`%%tfdist --shard`).

The notebook takes each named value apart into row-indexed parts (cluster/data/split.py):
plain arrays, whose bytes go once into one shared file (a `SharedBlock` each), and parts
that cannot be shared as bytes (an object column, a pandas index that is not a range),
sent to each worker as its own rows, pickled. A recipe says how to put a worker's rows
back together (worker/data/shards.py):

    ("block", i)                      rows of SharedBlock i, as a NumPy array
    ("part", i)                       this worker's rows of pickled part i, as they are
    ("frame", columns, parts, index)  a DataFrame: one recipe per column, an index recipe
    ("series", values, index, name)   a Series
    ("range", start, step, name)      a RangeIndex, its rows computed
    ("tuple" | "list", items)         a tuple or list of recipes
    ("dict", keys, items)             a dict, its keys in order

Worker r takes rows [start, stop) of every part: the r-th of N contiguous chunks, with
NumPy's array_split sizes. A large `--push` travels the same way, every worker taking
every row (`whole`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Where a worker on the notebook's host finds the shared files (memory, not disk).
SHARED_DIRECTORY = "/dev/shm"
FILE_PREFIX = "tfmw-shard-"


@dataclass(frozen=True)
class SharedBlock:
    """An array's bytes in the set's shared file: every row, C order, from `offset`."""

    offset: int
    dtype: str                  # NumPy's dtype.str, e.g. "<f4"
    shape: tuple[int, ...]      # of all rows
    row_bytes: int              # bytes of one row


@dataclass(frozen=True)
class StreamSource:
    """Where a worker on another host reads its rows: the notebook's sender."""

    addresses: tuple[str, ...]  # tried in order
    port: int
    token: str                  # proves the request comes from this shard set's worker


@dataclass(frozen=True)
class ShardTicket:
    """What one worker needs to build its rows of every value of a shard set."""

    recipes: dict[str, Any]               # variable name -> recipe
    blocks: tuple[SharedBlock, ...]
    start: int
    stop: int
    rows: int                             # of the whole set, every worker's
    path: str | None = None               # the shared file, on the notebook's host
    stream: StreamSource | None = None    # else: read the blocks' rows from here
    parts: dict[int, Any] = field(default_factory=dict)   # this worker's pickled rows
    whole: bool = False   # every row to every worker: a large --push, not a shard


def chunk_bounds(rows: int, workers: int) -> list[tuple[int, int]]:
    """[start, stop) of each worker's rows: contiguous, the first `rows % workers` chunks
    one row longer (NumPy's array_split sizes)."""
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    size, extra = divmod(rows, workers)
    bounds, start = [], 0
    for rank in range(workers):
        stop = start + size + (1 if rank < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds
