"""This engine's GPUs: found in the handshake, before TensorFlow touches a device.

NVML (the `pynvml` module) where it imports, else `nvidia-smi -L`, each under a
deadline. A CUDA_VISIBLE_DEVICES already set in the engine's environment (by the
user, or a batch system for its task) names the GPUs this engine may share. The
notebook splits them among the workers (protocol/devices.py); the bootstrap sets
each worker's CUDA_VISIBLE_DEVICES before the strategy makes TF list its devices.
Standard library only (TensorFlow is imported by the guard alone, once it is loaded).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
from dataclasses import dataclass

FIND_SECONDS = 10.0   # nvidia-smi on a busy host with many GPUs can take seconds
_LISTED = re.compile(r"^GPU (\d+):.*?(?:\(UUID: ([^)]+)\))?\s*$")


class GpuProblem(RuntimeError):
    """The GPUs could not be found or can no longer be assigned; the message says what to do."""


@dataclass(frozen=True)
class Gpu:
    index: str   # as NVML and nvidia-smi count (PCI bus order)
    uuid: str    # "GPU-..." ("" when not known)


def parse_nvidia_smi(text: str) -> list[Gpu]:
    """`nvidia-smi -L` lines ("GPU 0: NVIDIA A100 (UUID: GPU-...)"); MIG lines are skipped."""
    found = []
    for line in text.splitlines():
        match = _LISTED.match(line.strip())
        if match:
            found.append(Gpu(match.group(1), match.group(2) or ""))
    return found


def _with_nvml(timeout: float) -> list[Gpu] | None:
    """The GPUs through NVML, or None when pynvml is missing or NVML fails."""
    try:
        import pynvml
    except ImportError:
        return None
    found: list[list[Gpu]] = []

    def query() -> None:
        try:
            pynvml.nvmlInit()
        except Exception:   # no driver on this host: say nothing, let nvidia-smi answer
            return
        try:
            uuids = [pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i))
                     for i in range(pynvml.nvmlDeviceGetCount())]
            found.append([Gpu(str(i), u.decode() if isinstance(u, bytes) else str(u))
                          for i, u in enumerate(uuids)])
        finally:
            pynvml.nvmlShutdown()

    # A hung driver must not hang the handshake: NVML is asked in a thread of its own.
    asker = threading.Thread(target=query, name="tfmw-nvml", daemon=True)
    asker.start()
    asker.join(timeout)
    return found[0] if found else None


def _with_nvidia_smi(timeout: float) -> list[Gpu]:
    command = shutil.which("nvidia-smi")
    if command is None:
        return []
    try:
        done = subprocess.run([command, "-L"], capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise GpuProblem(f"`nvidia-smi -L` did not answer within {timeout:g} s, so this "
                         "host's GPUs are unknown: pass --gpus-per-worker K (or 0 for the "
                         "CPU)") from None
    # Installed but no driver loaded (a CPU node of a cluster image): no GPUs.
    return parse_nvidia_smi(done.stdout) if done.returncode == 0 else []


def host_gpus(timeout: float | None = None) -> list[Gpu]:
    """Every GPU of this host, in NVML's order (`timeout`: FIND_SECONDS by default)."""
    timeout = FIND_SECONDS if timeout is None else timeout
    found = _with_nvml(timeout)
    return found if found is not None else _with_nvidia_smi(timeout)


def _named(gpus: list[Gpu], entry: str) -> Gpu | None:
    """The GPU a CUDA_VISIBLE_DEVICES entry names: an index or a (prefix of a) UUID."""
    for gpu in gpus:
        if entry == gpu.index or (entry.startswith("GPU-") and gpu.uuid.startswith(entry)):
            return gpu
    return None


def shareable(gpus: list[Gpu], cuda_visible_devices: str | None) -> list[tuple[str, str]]:
    """(CUDA_VISIBLE_DEVICES value, UUID) of the GPUs this engine may use: all of them,
    or those its CUDA_VISIBLE_DEVICES names, as CUDA reads it (up to the first entry that
    names no GPU: "-1" or "" hide them all)."""
    if cuda_visible_devices is None:
        return [(gpu.index, gpu.uuid) for gpu in gpus]
    chosen = []
    for entry in (part.strip() for part in cuda_visible_devices.split(",")):
        gpu = _named(gpus, entry)
        if gpu is None:
            break
        chosen.append((entry, gpu.uuid))
    return chosen


def engine_gpus(timeout: float | None = None) -> list[tuple[str, str]]:
    """What the handshake reports: the GPUs this engine may share."""
    return shareable(host_gpus(timeout), os.environ.get("CUDA_VISIBLE_DEVICES"))


def check_still_assignable(before: str | None, wanted: str | None) -> None:
    """Refuse when TensorFlow already set up its devices on this engine with other GPUs
    visible than the notebook assigned (code ran TF here before the bootstrap): CUDA
    reads CUDA_VISIBLE_DEVICES only once. `before`: its value until the bootstrap."""
    from tensorflow.python.eager import context

    ctx = context.context()
    started = bool(getattr(ctx, "_initialized", False)
                   or getattr(ctx, "_physical_devices", None) is not None)
    if not started or wanted == before:
        return
    import tensorflow as tf

    if wanted != "-1" or tf.config.list_physical_devices("GPU"):
        raise GpuProblem(
            f"TensorFlow on this engine already set up its devices (with "
            f"CUDA_VISIBLE_DEVICES={before!r}), so GPUs {wanted} cannot be given to it: "
            "restart the engines, then attach again (or pass --gpus-per-worker 0)")
