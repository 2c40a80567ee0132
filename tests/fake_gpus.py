"""A fake `nvidia-smi` for tests: GPUs an engine "finds" on a machine that has none.

`install(directory, count)` writes an executable `nvidia-smi` there that prints
`count` lines as `nvidia-smi -L` does; put the directory first on the engines' PATH.
The count lives in a file next to it, so `set_count` changes what engines already
running will find at their next handshake. TensorFlow itself still finds no GPU
(and runs on the CPU whatever CUDA_VISIBLE_DEVICES names).
"""

from __future__ import annotations

import os

_SCRIPT = """#!/bin/sh
# A stand-in for `nvidia-smi -L` (tests/fake_gpus.py).
here=$(dirname "$0")
[ -f "$here/hang" ] && exec sleep 60
cat "$here/gpus.txt"
"""


def listing(count: int, tag: str = "0") -> str:
    """`nvidia-smi -L` output for `count` GPUs; `tag` makes the UUIDs of one host's own."""
    return "".join(f"GPU {i}: NVIDIA Fake A100 (UUID: GPU-{tag:0>8}-0000-4000-8000-{i:012d})\n"
                   for i in range(count))


def install(directory: str, count: int, tag: str = "0") -> str:
    """Write the fake into `directory`; returns the directory, to put first on PATH."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "nvidia-smi")
    with open(path, "w") as script:
        script.write(_SCRIPT)
    os.chmod(path, 0o755)
    set_count(directory, count, tag)
    return directory


def set_count(directory: str, count: int, tag: str = "0") -> None:
    with open(os.path.join(directory, "gpus.txt"), "w") as out:
        out.write(listing(count, tag))


def hang(directory: str) -> None:
    """From now on the fake never answers (as with a stuck driver)."""
    with open(os.path.join(directory, "hang"), "w"):
        pass


def path_with(directory: str) -> str:
    return directory + os.pathsep + os.environ.get("PATH", "")
