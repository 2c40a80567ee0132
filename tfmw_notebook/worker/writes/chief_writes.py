"""Every worker may save; only the chief's file counts.

A %%tfdist cell runs unchanged on every worker, so code written for one process saves from
every worker, to the path it names. Every worker must still call the save: reading mirrored
and on-read variables to save them can be a collective (tf-keras' worker_training_state says
so), and a worker that skipped it would leave the others waiting. But workers on one host that
write the same path race. Measured, 2 workers, 60 saves each: `checkpoint.save(prefix)` failed
14 times (`MergeV2Checkpoints ... NOT_FOUND`: one worker removed the `_temp` directory the
other was merging), CheckpointManager.save 29, tf.saved_model.save 6, Keras 3 save_weights 48
(`BlockingIOError: unable to lock file`), and a Keras 3 fit with ModelCheckpoint crashed the
job 3 times in 3; `model.save(".keras")` never failed but loads found a corrupt zip 9 times in
12. TensorFlow's multi-worker tutorial avoids it by hand (`write_filepath`); this module does
the same for the code, which stays unchanged.

Invariant, after `install(is_chief=False)`: a patched writer on this worker never writes under
a path the code named; it writes to this worker's *copy* of the path, inside a directory of its
own in `tempfile.gettempdir()` (private to each of our workers: tempdirs.py), which `cleanup()`
removes when the cell ends. Every worker still calls every save; only the path changes. Paths
already inside this worker's own temp directory, and in-memory `ram://` paths, are written as
named. On the chief nothing is patched: it writes the paths the code names.

Reads: a patched reader on a non-chief reads its own copy of a path when it wrote one since the
last `cleanup()` (the same bytes the chief wrote at the same point of the same code), and the
chief's file otherwise, which is what every worker must restore from after a restart. Reading
the chief's files right after a save is not safe: measured, a worker that only read them saw
the previous checkpoint 60 times in 60 (the chief was still writing), and its reads of an `.h5`
made 29 of the chief's 60 next saves fail on the file lock. Keras 3's `BackupAndRestore`
resumes from the chief's backup (unless this worker backed up itself in this cell).
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import functools
import os
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from typing import Any

from ..common import guarded_patches
from ..common.import_hooks import when_imported

_is_chief: bool | None = None     # set once by install()
_root: str | None = None          # this worker's copies, made at the first redirected write
_root_lock = threading.Lock()
_removed_roots: list[str] = []    # copies directories earlier cells' ends removed
_MARK = "_tfmw_chief_writes"      # set on every wrapper, so nothing is wrapped twice
_own = threading.local()          # .depth > 0: this package's own saves, which place their files
# tempdirs.worker_tempdir names each worker's own temp directory after its pid.
_PRIVATE_TEMP_NAME = "tfmw-worker-{pid}"
# TensorFlow's own name for a non-chief's directory (its multi-worker tutorials'
# `write_filepath`, tf-keras' distributed_file_utils): no other worker writes under it.
_RANK_DIR_NAME = "workertemp_{task_id}"
_rank_dir: str | None = None      # this worker's, set by install()
_listed: dict[str, list[Any]] | None = None   # package -> its modules, in _listed_once()


def install(is_chief: bool, task_id: int | None = None) -> None:
    """Patch this process's writers once: the chief's are left alone, the others' redirected.

    `task_id` (this worker's index) names the directory that is this worker's alone
    (`workertemp_<task_id>`): paths through it are written as named.

    TensorFlow's writers are patched now; tf-keras' and Keras 3's when they are imported
    (importing Keras 3 costs ~1.2 s here, more than a worker that uses tf-keras should pay).
    """
    global _is_chief, _rank_dir
    if _is_chief is not None:
        if bool(is_chief) != _is_chief:
            raise ValueError(
                "Invalid value for argument `is_chief`. Received: "
                f"is_chief={is_chief!r}. Expected {_is_chief!r}, as installed before in this "
                "process (a worker's rank does not change).")
        return
    _is_chief = bool(is_chief)
    if _is_chief:
        return
    if task_id is not None:
        _rank_dir = _RANK_DIR_NAME.format(task_id=task_id)
    atexit.register(cleanup)
    with _listed_once():
        _guarded("tensorflow.python.checkpoint, tensorflow.python.saved_model", "tensorflow",
                 _patch_tensorflow)
    for module_name, patch in (
        ("tf_keras.src.saving.saving_api", _patch_keras_saving),
        ("tf_keras.src.distribute.distributed_file_utils", _patch_tf_keras_temp_dirs),
        ("keras.src.saving.saving_api", _patch_keras_saving),
        ("keras.src.callbacks.model_checkpoint", _patch_keras3_model_checkpoint),
        ("keras.src.callbacks.backup_and_restore", _patch_keras3_backup),
    ):
        when_imported(module_name, patch)


def is_chief() -> bool:
    """Whether this process's files count: the chief's, or a process installed as no
    worker (a notebook's, a test's)."""
    return _is_chief is not False


def cleanup() -> None:
    """Remove this worker's copies made so far (the cell runner calls it when a cell ends).

    Until then a path a save returned (`Checkpoint.save` returns the copy's) stays usable, and
    the copies take no more room than the chief's own files (a save that replaces a file or
    that a CheckpointManager sweeps does the same to the copy).
    """
    global _root
    with _root_lock:
        root, _root = _root, None
    if root:
        _removed_roots.append(root)
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def as_named() -> Iterator[None]:
    """This package's own saves and reads (automatic checkpoints, end-of-fit snapshots)
    choose per-worker paths themselves: inside this block every path is used as named."""
    _own.depth = getattr(_own, "depth", 0) + 1
    try:
        yield
    finally:
        _own.depth -= 1


def copies_dir() -> str | None:
    """The directory holding this worker's copies now (None on the chief, or if none yet)."""
    return _root


def copy_path(path: str | os.PathLike) -> str:
    """This worker's copy of `path`: the same absolute path, under its copies directory."""
    text = os.fspath(path)
    scheme, sep, rest = text.partition("://")
    if sep:                      # gs://bucket/x -> <copies>/gs/bucket/x
        return os.path.join(_copies_root(), scheme, rest.lstrip("/"))
    full = os.path.abspath(text)
    if _root is not None and _inside(full, _root):
        return full              # already a copy: every mapping here may be applied twice
    return os.path.join(_copies_root(), full.lstrip(os.sep))


def _copies_root() -> str:
    global _root
    with _root_lock:
        if _root is None:
            _root = tempfile.mkdtemp(prefix="tfmw-chief-writes-")
        return _root


def _inside(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip(os.sep) + os.sep)


def _written_as_named(text: str) -> bool:
    """Paths no other worker can write: in-memory ones, this worker's own temp directory, and
    paths through its `workertemp_<task_id>` directory (code that already gives each worker a
    directory of its own makes it, writes into it and removes it: redirecting only the writes
    would split that one place in two); and every path of this package's own saves
    (as_named)."""
    if getattr(_own, "depth", 0) or text.startswith("ram://"):
        return True
    if _rank_dir is not None and _rank_dir in text.replace(os.sep, "/").split("/"):
        return True
    temp = tempfile.gettempdir()
    own = os.path.basename(temp) == _PRIVATE_TEMP_NAME.format(pid=os.getpid())
    return own and "://" not in text and _inside(os.path.abspath(text), temp)


def _write_path(path: Any) -> Any:
    """Where a save of `path` goes on this worker (anything not a path is passed as is)."""
    if _is_chief is not False or not isinstance(path, (str, os.PathLike)):
        return path
    text = os.fspath(path)
    if not isinstance(text, str) or _written_as_named(text):
        return path
    copy = copy_path(text)
    # Keras' writers do not create the parent directory: code makes it first (on every worker,
    # so it exists here too), and the copy needs its own. An object store has no directories.
    if "://" in text or os.path.isdir(os.path.dirname(os.path.abspath(text))):
        os.makedirs(os.path.dirname(copy), exist_ok=True)
    return copy


def _read_path(path: Any) -> Any:
    """What a read of `path` reads on this worker: its own copy if it wrote one, else `path`."""
    if _is_chief is not False or not isinstance(path, (str, os.PathLike)):
        return path
    text = os.fspath(path)
    if isinstance(text, str):
        for removed in _removed_roots:
            # A copy an earlier cell made and its end removed (a restore made then, read
            # later: a deferred restoration): the chief's file, written by now.
            if _inside(os.path.abspath(text), removed):
                return os.sep + os.path.relpath(os.path.abspath(text), removed)
    if _root is None:
        return path
    if not isinstance(text, str) or _written_as_named(text):
        return path
    copy = copy_path(text)
    # A checkpoint prefix names no file itself: its `.index` is the one that exists.
    if os.path.exists(copy) or os.path.exists(copy + ".index"):
        return copy
    if copy == os.path.abspath(text):
        # A copy this worker never wrote, e.g. an older checkpoint a CheckpointManager lists
        # (its list holds copies: see _manager_init): the chief's file it stands for.
        return os.sep + os.path.relpath(copy, _root)
    return path


def _read_prefix(prefix: Any) -> Any:
    """A RestoreV2 op's prefix (a path, or an eager string tensor of one), as _read_path maps
    it; a traced tensor is passed as is."""
    if _is_chief is not False or not _removed_roots:
        return prefix
    value = prefix.numpy() if hasattr(prefix, "numpy") else prefix
    if isinstance(value, bytes):
        value = value.decode()
    if not isinstance(value, str):
        return prefix
    mapped = _read_path(value)
    return prefix if mapped == value else mapped


def _read_state_dir(directory: Any, latest_filename: str | None = None) -> Any:
    """The directory whose checkpoint state file this worker reads (its copy's if it wrote one:
    the copy of a directory can exist for another writer's sake, without a state file)."""
    if _is_chief is not False or _root is None or not isinstance(directory, (str, os.PathLike)):
        return directory
    text = os.fspath(directory)
    if not isinstance(text, str) or _written_as_named(text):
        return directory
    copy = copy_path(text)
    return copy if os.path.exists(os.path.join(copy, latest_filename or "checkpoint")) else text


# --- patching -----------------------------------------------------------------------------


def _mapping_argument(function: Callable, position: int, name: str,
                      mapper: Callable[[Any], Any]) -> Callable:
    """`function` with its argument `name` (or the one at `position`) passed through `mapper`."""
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        if len(args) > position:
            args = (*args[:position], mapper(args[position]), *args[position + 1:])
        elif name in kwargs:
            kwargs[name] = mapper(kwargs[name])
        return function(*args, **kwargs)
    setattr(wrapper, _MARK, True)
    return wrapper


_RISK = ("workers writing the same path may race (MergeV2Checkpoints NOT_FOUND, "
         "'unable to lock file'); give each worker its own path (tfdist.rank)")


def _guarded(target: str, library: str, patch: Callable[[], None]) -> None:
    """Run `patch` through guarded_patches: a target it misses is skipped and reported."""
    guarded_patches.patch("chief_writes", target, lambda: patch, lambda found: found(),
                          risk=_RISK, library=library, on_chief=False)


def _replace_function(module: Any, name: str, wrap: Callable[[Callable], Callable]) -> None:
    """Replace `module.name`, and every re-export of it already made (the public `tf.train`,
    `keras.saving` ... modules bind the function itself when they are imported). Skipped
    and reported (guarded_patches.py) when `module` has no `name`."""
    _guarded(f"{module.__name__}.{name}", module.__name__.split(".")[0],
             lambda: _replace_function_now(module, name, wrap))


def _replace_function_now(module: Any, name: str, wrap: Callable[[Callable], Callable]) -> None:
    original = module.__dict__[name]
    if getattr(original, _MARK, False):
        return
    wrapper = wrap(original)
    for other in _package_modules(module.__name__.split(".")[0]):
        # __dict__, not getattr: getattr would load lazy modules (tf.keras) here.
        if getattr(other, "__dict__", {}).get(name) is original:
            setattr(other, name, wrapper)


def _package_modules(package: str) -> list[Any]:
    """The loaded modules of `package`: listed once inside _listed_once(), else each time."""
    if _listed is not None and package in _listed:
        return _listed[package]
    modules = [other for module_name, other in list(sys.modules.items())
               if module_name.partition(".")[0] == package]
    if _listed is not None:
        _listed[package] = modules
    return modules


@contextlib.contextmanager
def _listed_once() -> Iterator[None]:
    """Within: one listing of a package's modules serves every replacement. A non-chief's
    start made one pass over sys.modules (thousands of modules) per function replaced:
    0.1-0.3 s of its bootstrap on 2 loaded cores. Nothing is imported between the first
    replacement and the last."""
    global _listed
    outer = _listed
    _listed = {} if outer is None else outer
    try:
        yield
    finally:
        _listed = outer


def _replace_method(cls: type, name: str, wrap: Callable[[Callable], Callable]) -> None:
    """`cls.name` (its own, not inherited) wrapped once; skipped and reported when absent."""
    def replace() -> None:
        original = cls.__dict__[name]
        if not getattr(original, _MARK, False):
            wrapper = wrap(original)
            setattr(wrapper, _MARK, True)
            setattr(cls, name, wrapper)
    _guarded(f"{cls.__module__}.{cls.__qualname__}.{name}", cls.__module__.split(".")[0],
             replace)


def _patch_tensorflow() -> None:
    """tf.train.Checkpoint (save, write; read), CheckpointManager, tf.train.latest_checkpoint,
    tf.saved_model.save and load."""
    from tensorflow.python.checkpoint import checkpoint, checkpoint_management
    from tensorflow.python.ops import gen_io_ops
    from tensorflow.python.saved_model import load, save
    from tensorflow.python.training import py_checkpoint_reader

    # Checkpoint.save and CheckpointManager.save both write through _write; save's state file
    # goes next to the path _write returns, so it lands in the copy too.
    _replace_method(checkpoint.Checkpoint, "_write",
                    lambda f: _mapping_argument(f, 1, "file_prefix", _write_path))
    _replace_method(checkpoint.Checkpoint, "read",       # restore() reads through read()
                    lambda f: _mapping_argument(f, 1, "save_path", _read_path))
    _replace_method(checkpoint_management.CheckpointManager, "__init__", _manager_init)
    _replace_method(checkpoint_management.CheckpointManager, "save", _manager_save)
    # latest_checkpoint and CheckpointManager find the state through this module global.
    _replace_function(checkpoint_management, "get_checkpoint_state", _state_reader)
    # tf.saved_model.save, tf-keras' SavedModel format and Keras 3's export all end here.
    _replace_function(save, "save_and_return_nodes",
                      lambda f: _mapping_argument(f, 1, "export_dir", _write_path))
    _replace_function(load, "load_partial",             # tf.saved_model.load reads through it
                      lambda f: _mapping_argument(f, 0, "export_dir", _read_path))
    # A restore's later (deferred) reads open the path it was given when they happen: its
    # reader, and the RestoreV2 op of each variable restored later (prefix, a string tensor).
    _replace_function(py_checkpoint_reader, "NewCheckpointReader",
                      lambda f: _mapping_argument(f, 0, "filepattern", _read_path))
    _replace_function(gen_io_ops, "restore_v2",
                      lambda f: _mapping_argument(f, 0, "prefix", _read_prefix))


def _state_reader(get_checkpoint_state: Callable) -> Callable:
    @functools.wraps(get_checkpoint_state)
    def wrapper(checkpoint_dir, latest_filename=None):
        return get_checkpoint_state(_read_state_dir(checkpoint_dir, latest_filename),
                                    latest_filename)
    setattr(wrapper, _MARK, True)
    return wrapper


def _manager_init(init: Callable) -> Callable:
    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        # The state read above is the chief's (or this worker's copy): what to restore from.
        # What the manager writes, and the old checkpoints it deletes, are this worker's copy's:
        # it never deletes the chief's files.
        self._tfmw_named = (self._directory, self._checkpoint_prefix)
        self._directory = _write_path(self._directory)
        self._checkpoint_prefix = _write_path(self._checkpoint_prefix)
        self._maybe_delete = collections.OrderedDict(
            (_write_path(path), stamp) for path, stamp in self._maybe_delete.items())
    return __init__


def _manager_save(save: Callable) -> Callable:
    """Each save writes into this cell's copies: a manager made in an earlier cell held copies
    that cell's end removed (measured: the state file's write failed, NotFoundError)."""
    @functools.wraps(save)
    def wrapper(self, *args, **kwargs):
        named = getattr(self, "_tfmw_named", None)
        if named is None:
            return save(self, *args, **kwargs)
        with swapped(self, _directory=_write_path(named[0]),
                      _checkpoint_prefix=_write_path(named[1])):
            return save(self, *args, **kwargs)
    return wrapper


def _patch_keras_saving(saving_api: Any) -> None:
    """tf-keras' or Keras 3's model.save, save_weights, load_weights and load_model (and the
    ModelCheckpoint callbacks, which save through them)."""
    for name, position, mapper in (("save_model", 1, _write_path),
                                   ("save_weights", 1, _write_path),
                                   ("load_weights", 1, _read_path),
                                   ("load_model", 0, _read_path)):
        if name in saving_api.__dict__:
            _replace_function(saving_api, name, functools.partial(
                _mapping_argument, position=position, name="filepath", mapper=mapper))


def _patch_tf_keras_temp_dirs(distributed_file_utils: Any) -> None:
    """tf-keras' own multi-worker writers (ModelCheckpoint, BackupAndRestore, TensorBoard) put a
    non-chief's files in `<dir>/workertemp_<id>`, inside the chief's directory (visible there
    while it exists, and left there when a worker is killed): move that into the copy of <dir>."""
    _replace_function(distributed_file_utils, "_get_temp_dir",
                      lambda f: _mapping_argument(f, 0, "dirpath", _write_path))


@contextlib.contextmanager
def swapped(obj: Any, **values: Any) -> Iterator[None]:
    """While inside: `obj`'s attributes are `values` (the user's object looks the same after)."""
    saved = {name: getattr(obj, name) for name in values}
    for name, value in values.items():
        setattr(obj, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(obj, name, value)


def _copies_of(obj: Any, names: tuple[str, ...]) -> dict[str, Any]:
    return {name: _write_path(getattr(obj, name)) for name in names}


def _writing_to_copy(names: tuple[str, ...]) -> Callable[[Callable], Callable]:
    """Wraps a method so that, while it runs, the paths `names` are the object's copies."""
    def wrap(method: Callable) -> Callable:
        @functools.wraps(method)
        def wrapper(self, *args, **kwargs):
            with swapped(self, **_copies_of(self, names)):
                return method(self, *args, **kwargs)
        return wrapper
    return wrap


def _patch_keras3_model_checkpoint(model_checkpoint: Any) -> None:
    """Keras 3's ModelCheckpoint saves through model.save / save_weights, but first makes the
    named directory itself with os.makedirs (no exist_ok): two workers doing that raced
    (measured: FileExistsError on the chief). On a non-chief it formats its copy's path."""
    _replace_method(model_checkpoint.ModelCheckpoint, "_save_model",
                    _writing_to_copy(("filepath",)))


# Keras 3's BackupAndRestore: every path it writes or removes, under the names it keeps them.
_BACKUP_PATHS = ("backup_dir", "_weights_path", "_training_metadata_path",
                 "_prev_weights_path", "_prev_training_metadata_path")


def _patch_keras3_backup(backup_and_restore: Any) -> None:
    """Keras 3's BackupAndRestore writes `latest.weights.h5` and a metadata file from every
    worker (measured: BlockingIOError, then the peer's collective aborted) and removes the
    backup directory from every worker when fit ends. Its writes and removals go to the copy;
    its restore reads the chief's backup, the one every worker must resume from."""
    cls = backup_and_restore.BackupAndRestore
    _replace_method(cls, "_save_model", _writing_to_copy(_BACKUP_PATHS))
    _replace_method(cls, "on_train_end", _writing_to_copy(_BACKUP_PATHS))
    _replace_method(cls, "on_train_begin", _backup_restorer)


def _backup_restorer(on_train_begin: Callable) -> Callable:
    @functools.wraps(on_train_begin)
    def wrapper(self, logs=None):
        copies = _copies_of(self, _BACKUP_PATHS)
        if os.path.exists(copies["_weights_path"]):
            # This worker's own backup, from a fit earlier in this cell: the same state the
            # chief backed up at that point.
            with swapped(self, **copies):
                return on_train_begin(self, logs)
        try:
            return self._load_model()               # the chief's backup
        except OSError:
            # Keras would copy the previous backup over the damaged one, in the chief's
            # directory (the chief does that); this worker only reads the previous one,
            # through a copy of its own: Keras 3 loads no file whose name does not end in
            # `.weights.h5` (the previous one is `latest.weights.h5.bkp`).
            if not os.path.exists(self._prev_weights_path):
                raise
            previous = os.path.join(copies["backup_dir"], "previous.weights.h5")
            os.makedirs(copies["backup_dir"], exist_ok=True)
            shutil.copyfile(self._prev_weights_path, previous)
            metadata = self._prev_training_metadata_path
            if not os.path.exists(metadata):
                metadata = os.path.join(copies["backup_dir"], "no-metadata.json")
            with swapped(self, _weights_path=previous, _training_metadata_path=metadata):
                return self._load_model()
    return wrapper
