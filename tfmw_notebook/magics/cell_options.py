"""What a %%tfdist cell's Keras calls get, from the magic's flags and session settings.

Pure: turns parsed arguments into the CellOptions the workers understand
(run_options.py), and names the run directory.
"""

from __future__ import annotations

import os

from ..protocol import checkpoints, records
from ..protocol.run_options import BackupPolicy, CellOptions, CheckpointPolicy


def run_directory(checkpoint_dir: str | None, *, cwd: str, name: str | None = None) -> str:
    """The run's directory: the one asked for, else ./tfdist_checkpoints/NAME, else a new
    ./tfdist_checkpoints/run-N (N one more than the largest there)."""
    if checkpoint_dir:
        return os.path.abspath(os.path.join(cwd, os.path.expanduser(checkpoint_dir)))
    root = os.path.join(cwd, checkpoints.DEFAULT_ROOT)
    return os.path.join(root, name or records.next_run_name(root))


TENSORBOARD_ROOT = "tfdist_tensorboard"


def tensorboard_directory(asked: str | None, run_dir: str | None, *, cwd: str) -> str | None:
    """`--tensorboard [DIR]`: DIR, or ./tfdist_tensorboard/<the run's name> (None: off)."""
    if asked is None:
        return None
    if asked:
        return os.path.abspath(os.path.join(cwd, os.path.expanduser(asked)))
    name = os.path.basename(run_dir) if run_dir else os.path.basename(
        run_directory(None, cwd=cwd))
    return os.path.join(cwd, TENSORBOARD_ROOT, name)


def backup_frequency(text: str) -> str | int:
    """`--backup-every`: "epoch" or a number of steps."""
    if text == "epoch":
        return "epoch"
    try:
        steps = int(text)
    except ValueError:
        raise ValueError(
            f"--backup-every takes 'epoch' or a number of steps, got {text!r}") from None
    if steps < 1:
        raise ValueError(f"--backup-every takes 'epoch' or a number of steps >= 1, got {steps}")
    return steps


def resume_point(spec: str, *, cwd: str) -> checkpoints.CheckpointInfo:
    """`--resume-from`: 'latest', a path (from `cwd`), or a run or checkpoint under
    ./tfdist_checkpoints/ (`--resume-from run-20250101-120000`)."""
    root = os.path.join(cwd, checkpoints.DEFAULT_ROOT)
    path = os.path.join(cwd, os.path.expanduser(spec))
    if spec != "latest" and os.path.exists(path):
        return checkpoints.resolve(path, root=root)
    return checkpoints.resolve(spec, root=root)


def build(args, *, dashboard: bool, checkpointing: bool, resume_next: str | None,
          cwd: str, name: str | None = None) -> tuple[CellOptions, str | None]:
    """The cell's CellOptions, and the run directory.

    `resume_next` is a checkpoint the picker chose for the next cell; an explicit
    `--resume-from` wins over it. `name`: the run's name (--name), its directory
    under ./tfdist_checkpoints; without one, a resumed run goes on in its own directory.
    """
    spec = args.resume_from or resume_next
    resume = resume_point(spec, cwd=cwd) if spec else None
    saving = checkpointing and not args.no_checkpoint
    # --backup-every alone asks for the backup: a rerun with the same run resumes from it.
    backing_up = bool(args.max_restarts) or args.backup_every is not None
    if resume is not None and not args.checkpoint_dir and not name:
        run_dir = os.path.dirname(resume.path)  # continue the same run
    elif saving or backing_up:
        run_dir = run_directory(args.checkpoint_dir, cwd=cwd, name=name)
    else:
        run_dir = None
    checkpoint = backup = None
    if saving and run_dir is not None:
        checkpoint = CheckpointPolicy(run_dir=run_dir, every=args.checkpoint_every,
                                      keep_last=args.keep_last, keep_best=args.keep_best,
                                      monitor=args.monitor, mode=args.monitor_mode)
    if backing_up and run_dir is not None:
        backup = BackupPolicy(directory=os.path.join(run_dir, "backup"),
                              save_freq=args.backup_every or "epoch", grace=args.grace)
    options = CellOptions(report=dashboard and not args.no_dashboard,
                          quiet_progress=not args.raw_progress, checkpoint=checkpoint,
                          backup=backup,
                          resume_from=resume.path if resume is not None else None,
                          tensorboard=tensorboard_directory(args.tensorboard, run_dir, cwd=cwd),
                          trial=getattr(args, "trial_monitor", None))  # set by a sweep
    return options, run_dir
