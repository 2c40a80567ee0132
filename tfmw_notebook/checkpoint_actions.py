"""`%tfdist checkpoints`: the picker's actions, bound to this session.

restore: load the checkpoint into a model on every worker; resume: the next
%%tfdist cell continues training from it; load: rebuild the model in this
notebook; delete: remove it from disk.
"""

from __future__ import annotations

import os

from . import checkpoints
from .checkpoints import CheckpointInfo


def find_run(directory: str | None, last_run: str | None) -> str:
    """The run to show: the one named, else this session's last, else the newest."""
    if directory:
        path = os.path.abspath(os.path.expanduser(directory))
        if not os.path.isdir(path):
            raise ValueError(f"{directory} is not a directory: give a run directory "
                             f"(e.g. {checkpoints.DEFAULT_ROOT}/run-...)")
        return path
    if last_run and os.path.isdir(last_run):
        return last_run
    runs = checkpoints.list_runs(os.path.abspath(checkpoints.DEFAULT_ROOT))
    if not runs:
        raise ValueError(f"no checkpoints under ./{checkpoints.DEFAULT_ROOT}: train in a "
                         "%%tfdist cell first (fit() saves every epoch), or name a run directory")
    return runs[0]


def load_into_notebook(path: str):
    """Rebuild the saved model in this process (for predictions or inspection)."""
    import json
    import sys

    if "tensorflow" not in sys.modules:
        # The first TF import here: keep its C++ start-up chatter out of the cell.
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        import tf_keras
    except ImportError:
        raise ValueError("loading here needs tf-keras in the notebook's Python: "
                         "pip install tf-keras") from None
    import tensorflow as tf

    spec = os.path.join(path, checkpoints.MODEL_JSON)
    if not os.path.exists(spec):
        raise ValueError(f"{os.path.basename(path)} holds weights only (the model has no JSON "
                         "form, e.g. a subclassed model): build the model here and restore with "
                         "tf.train.Checkpoint(model=model).read(...)")
    with open(spec) as source:
        model = tf_keras.models.model_from_json(source.read())
    weights = os.path.join(path, checkpoints.WEIGHTS)
    tf.train.Checkpoint(**checkpoints.trackables(model)).read(weights).expect_partial()
    with open(os.path.join(path, checkpoints.META_FILE)) as meta:
        model._tfmw_checkpoint = json.load(meta)
    return model


def show_checkpoints(shell, directory: str | None, session):
    """The picker for a run, its buttons bound to this notebook `session`."""
    try:
        run_dir = find_run(directory, session.last_run)
    except ValueError as exc:
        from IPython.core.error import UsageError

        raise UsageError(str(exc)) from None
    found = checkpoints.list_checkpoints(run_dir)

    def restore(info: CheckpointInfo, model_name: str):
        cluster = session.cluster
        if cluster is None:
            raise ValueError("no cluster is running: `%tfdist start` it, build the model, "
                             "then restore")
        digests = cluster.restore_checkpoint(info.path, model_name)
        return f"restored {info.name} into {model_name!r} on {len(digests)} workers"

    def resume(info: CheckpointInfo):
        session.resume_next = info.path
        return f"the next %%tfdist cell's fit() resumes from {info.name} (epoch {info.epoch})"

    def load(info: CheckpointInfo):
        shell.user_ns["checkpoint_model"] = load_into_notebook(info.path)
        return f"loaded {info.name} into `checkpoint_model` in this notebook"

    def delete(info: CheckpointInfo):
        checkpoints.delete_checkpoint(info)
        return f"deleted {info.name}"

    if getattr(shell, "kernel", None) is None:
        print(f"{run_dir}:")
        for info in found:
            metrics = " ".join(f"{k} {v:.4g}" for k, v in info.metrics.items())
            print(f"  {info.name}  epoch {info.epoch}  step {info.step}  {metrics}")
        return None

    from IPython.display import display

    from .widgets.picker import CheckpointPicker

    picker = CheckpointPicker(found, {"restore": restore, "resume": resume, "load": load,
                                      "delete": delete})
    display(picker.widget)
    return None
