"""Which worker this process is: its rank, set once by the bootstrap, read by any room."""

from __future__ import annotations

_rank: int = 0


def install(rank: int) -> None:
    global _rank
    _rank = rank


def rank() -> int:
    """This worker's rank (0, the chief, until the bootstrap says otherwise)."""
    return _rank
