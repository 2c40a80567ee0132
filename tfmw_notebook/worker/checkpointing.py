"""Chief-correct checkpoints written for the user, and restoring them.

Every worker takes part in each save (under MultiWorkerMirroredStrategy a save
may need all of them). The chief writes into a temporary directory beside the
checkpoints and commits it by renaming it into place, so a checkpoint is complete
or absent even if a worker dies while writing. The others write a throw-away copy
into their own temp directory: it never takes space on the checkpoint disk, so a
full disk fails the chief's save (and that checkpoint) only, never after the
chief has committed it. The Keras callback that saves after each epoch is in
keras_checkpoint_saver.py (it imports TensorFlow; this module does so only in its
functions).
"""

from __future__ import annotations

import errno
import json
import os
import random
import shutil
import tempfile
import time
import uuid

from ..protocol import checkpoints
from ..protocol.checkpoints import MODEL_JSON, WEIGHTS, trackables
from ..protocol.run_options import CheckpointPolicy
from . import chief_writes, keras_flavour

_TOKENS = random.SystemRandom()   # leaves `random`'s global generator to the user's code


def save(model, *, run_dir: str, epoch: int, rank: int, is_chief: bool, metrics: dict,
         wall_time: float, policy: CheckpointPolicy) -> str | None:
    """Write checkpoint `epoch` of `model`; returns its path on the chief."""
    import tensorflow as tf

    temp = None
    try:
        if is_chief:
            temp = checkpoints.prepare_temp(run_dir, epoch, f"w{rank}-{uuid.uuid4().hex[:8]}")
        else:
            temp = tempfile.mkdtemp(prefix=f"tfmw-ckpt-{epoch}-")
        with chief_writes.as_named():   # each worker's path is chosen above
            tf.train.Checkpoint(**trackables(model)).write(os.path.join(temp, WEIGHTS))
        if not is_chief:
            return None
        try:
            with open(os.path.join(temp, MODEL_JSON), "w") as out:
                out.write(model.to_json())
        except (NotImplementedError, TypeError, ValueError):
            pass  # subclassed models have no JSON form; weights still restore into code
        optimizer = getattr(model, "optimizer", None)
        step = int(optimizer.iterations.numpy()) if optimizer is not None else None
        checkpoints.write_meta(temp, {
            "epoch": epoch, "step": step, "metrics": metrics, "wall_time": wall_time,
            "saved_at": time.time(), "tf_version": tf.__version__,
            "run": os.path.basename(os.path.normpath(run_dir)), "model": model.name,
            "keras": keras_flavour.keras_of(model),   # which Keras reads model.json back
        })
        final = checkpoints.commit(temp, run_dir, epoch)
        temp = None
        _apply_retention(run_dir, policy)
        return final
    except Exception as error:
        if not _disk_full(error):
            raise
        raise CheckpointDiskFull(
            f"{checkpoints.checkpoint_name(epoch)} did not fit: the disk holding {run_dir} is "
            f"full ({_free(run_dir)} free); the earlier checkpoints are intact. Free space, keep "
            "fewer (--keep-last N) or save elsewhere (--checkpoint-dir DIR)") from None
    finally:
        if temp is not None and os.path.isdir(temp):
            shutil.rmtree(temp, ignore_errors=True)


class CheckpointDiskFull(OSError):
    """A checkpoint did not fit on its disk (what was written of it is removed)."""


def _disk_full(error: BaseException) -> bool:
    # Python says ENOSPC; TensorFlow's file system layer says it in its message.
    return (isinstance(error, OSError) and error.errno == errno.ENOSPC) or \
        "No space left on device" in str(error)


def _free(path: str) -> str:
    try:
        return f"{shutil.disk_usage(path).free / 1e6:.1f} MB"
    except OSError:
        return "unknown space"


def _apply_retention(run_dir: str, policy: CheckpointPolicy) -> None:
    if not policy.prunes:
        return
    for info in checkpoints.select_to_delete(
            checkpoints.list_checkpoints(run_dir), keep_last=policy.keep_last,
            keep_best=policy.keep_best, monitor=policy.monitor, mode=policy.mode):
        checkpoints.delete_checkpoint(info)


def restore(model, path: str) -> dict:
    """Load checkpoint `path` into `model` (and its optimizer, once it has slots)."""
    import tensorflow as tf

    with chief_writes.as_named():
        status = tf.train.Checkpoint(**trackables(model)).read(os.path.join(path, WEIGHTS))
    status.expect_partial()  # optimizer slots restore when they are first created
    with open(os.path.join(path, "meta.json")) as meta:
        return json.load(meta)


def restore_named(name: str, path: str) -> dict:
    """Restore into the user's variable `name` on this worker (picker / API)."""
    from IPython import get_ipython

    namespace = get_ipython().user_ns
    if name not in namespace:
        raise NameError(f"no model named {name!r} on this worker: build it first, "
                        "or type the name of the variable that holds it")
    return restore(namespace[name], path)


def weights_digest(name: str) -> str:
    """A digest of a model's weights, to check that restores are bit-identical."""
    import hashlib

    from IPython import get_ipython

    digest = hashlib.sha256()
    for weight in get_ipython().user_ns[name].get_weights():
        digest.update(weight.tobytes())
    return digest.hexdigest()


_shared_dirs: set[str] = set()   # run directories every worker was seen to share


class RunDirNotShared(RuntimeError):
    """Some worker does not see the directory the chief saves checkpoints into."""


def check_shared(run_dir: str, *, rank: int, world_size: int) -> None:
    """Every worker must see the run directory the chief writes (hosts need a shared disk):
    restores and resumes read it on every worker. Checked once per directory.

    The chief leaves a marker with a random name and announces the name in an
    all-reduce (which also makes the others wait until it is written); a second
    all-reduce tells every worker which ranks do not see it. Every worker raises the
    same error, or none does.
    """
    if world_size < 2 or run_dir in _shared_dirs:
        return
    from . import collectives

    marker = None
    token = 0
    if rank == 0:
        # Exact in the float32 all-reduce. Drawn from the system, not `random`'s global
        # generator: that is the user's (`keras.utils.set_random_seed` seeds it, and
        # Keras 3 draws its unseeded initializers' seeds from it), and a chief-only draw
        # made the chief's next model start apart from one process's.
        token = _TOKENS.randrange(1, 1 << 24)
        marker = os.path.join(run_dir, f".tfmw-shared-check-{token}")
        with open(marker, "w"):
            pass
    token = int(collectives.sum_across(float(token)))
    seen = rank == 0 or os.path.exists(os.path.join(run_dir, f".tfmw-shared-check-{token}"))
    # Which ranks do not see it: one bit each (exact in float32 for up to 24 workers).
    by_bits = world_size <= 24
    missing = int(collectives.sum_across(0.0 if seen else float(1 << rank if by_bits else 1)))
    if marker is not None:
        os.remove(marker)
    if not missing:
        _shared_dirs.add(run_dir)
        return
    who = (", ".join(str(r) for r in range(world_size) if missing >> r & 1) if by_bits
           else f"{missing} of {world_size}")
    raise RunDirNotShared(
        f"workers {who} do not see {run_dir}, where the chief (worker 0) saves checkpoints "
        "(`%tfdist status` shows their hosts): put checkpoints on storage every host mounts "
        "at the same path (`--checkpoint-dir /shared/path`), or pass --no-checkpoint")
