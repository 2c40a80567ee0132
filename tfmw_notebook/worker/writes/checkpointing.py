"""Chief-correct checkpoints written for the user, and restoring them.

Every worker takes part in each save: each reads the checkpoint's values at the same
point of training (under MultiWorkerMirroredStrategy those reads may need all of them;
weights_snapshot.py). The chief's writer thread (background_writes.py) then writes them
into a temporary directory beside the checkpoints while training goes on, and commits it
by renaming it into place, so a checkpoint is complete or absent even if a worker dies
while writing. The others write nothing, so a full disk
fails the chief's save (and that checkpoint) only. The Keras callback that saves after
each epoch is in keras_checkpoint_saver.py (it imports TensorFlow; this module does so
only in its functions).
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

from ...protocol import checkpoints
from ...protocol.checkpoints import MODEL_JSON, WEIGHTS, trackables
from ...protocol.run_options import CheckpointPolicy
from ..corrections import keras_flavour
from . import background_writes, chief_writes, weights_snapshot

_TOKENS = random.SystemRandom()   # leaves `random`'s global generator to the user's code
_run_start: dict | None = None    # where the running fit's run began (see run_began)


def run_began(epoch: int | None, step: int | None) -> None:
    """The running fit's run began at `epoch` with its optimizer at `step` (None: no fit
    runs, or not known): its checkpoints record it, so that `--resume-from` puts the
    input of the fit it continues at the checkpoint's step (fits/input_position.py)."""
    global _run_start
    _run_start = None if epoch is None or step is None else {"epoch": epoch, "step": step}


def save(model, *, run_dir: str, epoch: int, rank: int, is_chief: bool, metrics: dict,
         wall_time: float, policy: CheckpointPolicy,
         taker: weights_snapshot.SnapshotTaker | None = None) -> str | None:
    """Checkpoint `epoch` of `model`: read now on every worker, written and committed by
    the chief's writer thread (background_writes.py) while training goes on; returns its
    path on the chief. A write that fails is raised by the next save, or at the cell's end.

    The notebook knows a write is under way (the writer says so): before it restarts the
    workers after an interrupt or a failure it lets the write end (cell_watch.py), so an
    epoch the user saw saved is not lost. `taker`: the fit's, which gathers once."""
    snapshot = (taker or weights_snapshot.SnapshotTaker()).take(model)
    if snapshot is None:   # this TensorFlow cannot snapshot: every worker writes in place
        return _save_in_place(model, run_dir=run_dir, epoch=epoch, rank=rank,
                              is_chief=is_chief, metrics=metrics, wall_time=wall_time,
                              policy=policy)
    if not is_chief:
        return None
    meta = _meta(model, run_dir, epoch, metrics, wall_time)
    model_json = _model_json(model)

    def write() -> None:
        _write_committed(run_dir, epoch, rank, policy, meta, model_json, snapshot.write)

    background_writes.hand_over(write)
    return os.path.join(run_dir, checkpoints.checkpoint_name(epoch))


def _save_in_place(model, *, run_dir: str, epoch: int, rank: int, is_chief: bool,
                   metrics: dict, wall_time: float, policy: CheckpointPolicy) -> str | None:
    """The save on the training thread. The others write a throw-away copy: under
    MultiWorkerMirroredStrategy the reads of a save may need every worker."""
    import tensorflow as tf

    def write(prefix: str) -> None:
        tf.train.Checkpoint(**trackables(model)).write(prefix)

    if not is_chief:
        temp = tempfile.mkdtemp(prefix=f"tfmw-ckpt-{epoch}-")
        try:
            with chief_writes.as_named():
                write(os.path.join(temp, WEIGHTS))
        finally:
            shutil.rmtree(temp, ignore_errors=True)
        return None
    return _write_committed(run_dir, epoch, rank, policy,
                            _meta(model, run_dir, epoch, metrics, wall_time),
                            _model_json(model), write)


def _meta(model, run_dir: str, epoch: int, metrics: dict, wall_time: float) -> dict:
    import tensorflow as tf

    optimizer = getattr(model, "optimizer", None)
    step = int(optimizer.iterations.numpy()) if optimizer is not None else None
    return {"epoch": epoch, "step": step, "start": _run_start, "metrics": metrics,
            "wall_time": wall_time, "saved_at": time.time(), "tf_version": tf.__version__,
            "run": os.path.basename(os.path.normpath(run_dir)), "model": model.name,
            "keras": keras_flavour.keras_of(model)}   # which Keras reads model.json back


def _model_json(model) -> str | None:
    try:
        return model.to_json()
    except (NotImplementedError, TypeError, ValueError):
        return None   # subclassed models have no JSON form; weights still restore into code


def _write_committed(run_dir: str, epoch: int, rank: int, policy: CheckpointPolicy,
                     meta: dict, model_json: str | None, write_weights) -> str:
    """Fill a temporary directory (weights, model.json, meta.json last), rename it into
    place, prune: a checkpoint is complete or absent whenever the writer stops."""
    temp = None
    try:
        temp = checkpoints.prepare_temp(run_dir, epoch, f"w{rank}-{uuid.uuid4().hex[:8]}")
        with chief_writes.as_named():   # the chief's own path
            write_weights(os.path.join(temp, WEIGHTS))
        if model_json is not None:
            with open(os.path.join(temp, MODEL_JSON), "w") as out:
                out.write(model_json)
        checkpoints.write_meta(temp, meta)
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


def _one_host() -> bool:
    """Whether TF_CONFIG's workers all have one address: one machine, one disk. Every
    worker reads the same TF_CONFIG, so all skip the check's all-reduces or none does."""
    try:
        workers = json.loads(os.environ["TF_CONFIG"])["cluster"]["worker"]
        return len({address.rsplit(":", 1)[0] for address in workers}) == 1
    except (KeyError, ValueError, TypeError, AttributeError):
        return False


class RunDirNotShared(RuntimeError):
    """Some worker does not see the directory the chief saves checkpoints into."""


def check_shared(run_dir: str, *, rank: int, world_size: int) -> None:
    """Every worker must see the run directory the chief writes (hosts need a shared disk):
    restores and resumes read it on every worker. Checked once per directory, and not at
    all when every worker is on one host (each cell's fit has a run directory of its own:
    the check's two all-reduces cost each fit 25-35 ms, measured on 2 workers).

    The chief leaves a marker with a random name and announces the name in an
    all-reduce (which also makes the others wait until it is written); a second
    all-reduce tells every worker which ranks do not see it. Every worker raises the
    same error, or none does.
    """
    if world_size < 2 or run_dir in _shared_dirs or _one_host():
        return
    from ..liveness import collectives

    token, marker = _leave_marker(run_dir) if rank == 0 else (0, None)
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
    raise _not_shared(run_dir, missing, world_size, by_bits)


def _leave_marker(run_dir: str) -> tuple[int, str]:
    """The chief's marker: an empty file in `run_dir` named after a random token, which
    is exact in the float32 all-reduce that announces it. Returns (token, path)."""
    # Drawn from the system, not `random`'s global generator: that is the user's
    # (`keras.utils.set_random_seed` seeds it, and Keras 3 draws its unseeded
    # initializers' seeds from it), and a chief-only draw made the chief's next model
    # start apart from one process's.
    token = _TOKENS.randrange(1, 1 << 24)
    marker = os.path.join(run_dir, f".tfmw-shared-check-{token}")
    with open(marker, "w"):
        pass
    return token, marker


def _not_shared(run_dir: str, missing: int, world_size: int, by_bits: bool) -> RunDirNotShared:
    """The error every worker raises when the ranks `missing` (one bit each if `by_bits`,
    else their count) do not see `run_dir`."""
    who = (", ".join(str(r) for r in range(world_size) if missing >> r & 1) if by_bits
           else f"{missing} of {world_size}")
    return RunDirNotShared(
        f"workers {who} do not see {run_dir}, where the chief (worker 0) saves checkpoints "
        "(`%tfdist status` shows their hosts): put checkpoints on storage every host mounts "
        "at the same path (`--checkpoint-dir /shared/path`), or pass --no-checkpoint")
