"""The `%tfdist` and `%%tfdist` argument parsers, and the help made from them.

Every flag is declared here once; misuse raises UsageError, which IPython shows as
one line with the right usage and no traceback.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic_arguments import MagicArgumentParser

from ..cluster.launch.limits import DEFAULT_TIMEOUT
from ..cluster.runs import tracking as tracking_settings
from ..cluster.tfcluster import COMMUNICATIONS, DEFAULT_KERAS
from ..protocol.devices import AUTO
from ..protocol.run_options import DEFAULT_GRACE, MONITOR_MODES
from ..protocol.tfconfig import KERAS_VERSIONS, parse_address_map
from ..widgets import tensorboard_view
from . import cell_options


def _number(convert: Callable[[str], Any], name: str, wanted: str,
            acceptable: Callable[[Any], bool]) -> Callable[[str], Any]:
    """An argparse type: `convert` the text, then check it; errors say what was expected."""
    def parse(text: str):
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {name}, got {text!r}") from None
        if not acceptable(value):
            raise argparse.ArgumentTypeError(f"expected {wanted}, got {value:g}")
        return value
    return parse


count = _number(int, "a whole number", "a whole number >= 1", lambda value: value >= 1)
non_negative = _number(int, "a whole number", "0 or more", lambda value: value >= 0)
seconds = _number(float, "seconds", "seconds > 0", lambda value: value > 0)
finite_seconds = _number(float, "seconds", "seconds > 0", lambda value: 0 < value < math.inf)


def grace_seconds(text: str) -> float | None:
    """`--grace`: seconds > 0, or `off` (a SIGTERM ends a worker at once)."""
    return None if text.strip().lower() == "off" else finite_seconds(text)


# A usage longer than this is cut short in an error (the cell magic's has 30 options).
USAGE_WIDTH = 160


class Parser(MagicArgumentParser):
    """Argument errors as one line that also shows the right usage."""

    def error(self, message):
        raise UsageError(f"{message} (usage: {self.short_usage()})")

    def short_usage(self) -> str:
        """The usage on one line; when too long, its first options and where the rest are."""
        # IPython's usage starts with "::" (for its docs) and wraps over lines.
        usage = " ".join(self.format_usage().replace("::", "", 1).split())
        if len(usage) <= USAGE_WIDTH:
            return usage
        cut = usage.rfind("] ", 0, USAGE_WIDTH - 60) + 1
        return f"{usage[:cut]} ...; every option: %tfdist?"

    def parse_args(self, args=None, namespace=None):
        # argparse reports a subcommand's unknown options with the top level's usage.
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            chosen = _subcommand(self, getattr(parsed, "command", None))
            (chosen or self).error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed


def _backup_frequency(text: str):
    try:
        return cell_options.backup_frequency(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _gpus_per_worker(text: str) -> int | str:
    if text.strip().lower() == AUTO:
        return AUTO
    try:
        return non_negative(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected auto or a whole number >= 0, "
                                         f"got {text!r}") from None


def _address_map(text: str) -> dict[str, str]:
    try:
        return parse_address_map(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _keras_version(text: str) -> int:
    if text.strip() not in [str(version) for version in KERAS_VERSIONS]:
        raise argparse.ArgumentTypeError(
            f"expected {' or '.join(str(v) for v in KERAS_VERSIONS)} (3: tf.keras is Keras 3; "
            f"2: tf.keras is tf-keras), got {text!r}; the workers were not touched")
    return int(text)


def _add_worker_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--timeout", type=seconds, default=DEFAULT_TIMEOUT, metavar="S",
                        help="seconds to wait for engines and TensorFlow to come up "
                             f"(default {DEFAULT_TIMEOUT:g})")
    parser.add_argument("--communication", choices=COMMUNICATIONS, default="auto",
                        help="collective implementation for MultiWorkerMirroredStrategy")
    parser.add_argument("--gpus-per-worker", type=_gpus_per_worker, default=AUTO,
                        metavar="auto|K",
                        help="GPUs each worker sees: auto (default) splits each host's GPUs "
                             "evenly among its workers (none found: the CPU); K each; 0 "
                             "hides every GPU")
    parser.add_argument("--min-workers", type=count, default=None, metavar="K",
                        help="when a host is lost, go on with the workers of the hosts left "
                             "if they are at least K (default: stop every worker)")
    parser.add_argument("--keras", type=int, choices=KERAS_VERSIONS, default=DEFAULT_KERAS,
                        help=f"2: tf.keras is tf-keras (TensorFlow's tutorials) and `import "
                             f"keras` is Keras 3 (keras.io); 3: tf.keras is Keras 3 too "
                             f"(default {DEFAULT_KERAS})")


def _line_parser() -> Parser:
    parser = Parser(prog="tfdist", description=(
        "Multi-worker TensorFlow on ipyparallel engines. As a cell magic (%%tfdist) it runs "
        "the cell on every worker inside the shared MultiWorkerMirroredStrategy's scope."))
    # The commands in the order `%tfdist?` and the error for an unknown one list them.
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_start_command(commands)
    _add_attach_command(commands)
    commands.add_parser("status", help="one line per worker: rank, host, pid, alive")
    commands.add_parser("history", help="the last training cell's metrics (per worker, merged)")
    _add_switches(commands)
    _add_checkpoints_command(commands)
    _add_insight_commands(commands)
    _add_runs_command(commands)
    _add_tracking_command(commands)
    _add_restart_commands(commands)
    commands.add_parser("stop", help="end every process the cluster started")
    return parser


def _add_start_command(commands) -> None:
    start = commands.add_parser("start", help="start N local engines, one worker each")
    start.add_argument("-n", "--workers", type=count, default=2, metavar="N",
                       help="number of workers (default 2)")
    _add_worker_options(start)
    start.add_argument("--standby", type=non_negative, default=0, metavar="K",
                       help="keep K spare engines with TensorFlow imported: a restart of up "
                            "to K workers takes them instead of cold ones (each holds an idle "
                            "worker's memory)")
    start.add_argument("--no-isolation", action="store_true",
                       help="run the workers on this machine's network: their TensorFlow "
                            "ports (no authentication) are then open to other machines")


def _add_checkpoints_command(commands) -> None:
    picker = commands.add_parser("checkpoints", help="pick a checkpoint: compare, restore on "
                                 "the workers, resume from, load here, delete")
    picker.add_argument("directory", nargs="?", default=None,
                        help="a run directory (default: the last run of this session, "
                             "else the newest under ./tfdist_checkpoints)")


def _add_runs_command(commands) -> None:
    runs = commands.add_parser("runs", help="compare the recorded runs (one per fit of a "
                               "%%tfdist cell): a table, their curves, their checkpoints")
    runs.add_argument("--delete", metavar="NAME", default=None,
                      help="delete run NAME: its record and its checkpoints")
    runs.add_argument("--root", metavar="DIR", default=None,
                      help="where the runs are (default ./tfdist_checkpoints)")


def _add_restart_commands(commands) -> None:
    """restart and resize: new worker processes in place of the old."""
    restart = commands.add_parser("restart", help="fresh engine processes, same size; "
                                  "variables are reset (with --keras: replayed)")
    restart.add_argument("--keras", type=_keras_version, default=None, metavar="3|2",
                         help="switch the workers' Keras (as --keras of start) and replay the "
                              "pushes and cells run so far on them (each fit trains again)")
    resize = commands.add_parser("resize", help="replace the workers by N new ones holding "
                                 "the same state (the cells run so far are replayed)")
    resize.add_argument("-n", "--workers", type=count, required=True, metavar="N",
                        help="the number of workers from now on")


def _add_switches(commands) -> None:
    """dashboard, checkpointing, restore: on|off for the following cells."""
    dashboard = commands.add_parser("dashboard", help="turn the live dashboard on or off")
    dashboard.add_argument("state", choices=("on", "off"))
    saving = commands.add_parser("checkpointing", help="turn automatic checkpoints on or off")
    saving.add_argument("state", choices=("on", "off"))
    restore = commands.add_parser("restore", help="after a restart the workers need, replay "
                                  "the earlier cells to give back their state (default on)")
    restore.add_argument("state", choices=("on", "off"))


def _add_attach_command(commands) -> None:
    attach = commands.add_parser("attach", help="use a running ipyparallel cluster")
    attach.add_argument("--profile", help="ipyparallel profile (default: 'default')")
    attach.add_argument("--cluster-id", help="cluster id given to `ipcluster start`")
    attach.add_argument("--url-file", metavar="F", help="the controller's ipcontroller-client.json")
    attach.add_argument("--interface", metavar="NAME", default=None,
                        help="network interface whose address each worker advertises "
                             "(default: the one that reaches the controller)")
    attach.add_argument("--address-map", type=_address_map, default=None,
                        metavar="HOST=ADDR,...", help="the address each host's workers advertise")
    attach.add_argument("-n", "--workers", type=count, default=None, metavar="N",
                        help="wait for N engines (default: use those registered)")
    attach.add_argument("--standby", type=non_negative, default=0, metavar="K",
                        help="keep K spare engines, launched through the cluster's launcher "
                             "(needs --profile)")
    _add_worker_options(attach)


def _add_insight_commands(commands) -> None:
    """tensorboard and diagnose: looking into the training, not running it."""
    board = commands.add_parser("tensorboard", help="show the TensorBoard logs of this "
                                "session's fits inline (the server stops with the cluster)")
    board.add_argument("directory", nargs="?", default=None,
                       help="a log directory (default: where this session's TensorBoard "
                            "callbacks wrote)")
    board.add_argument("--height", type=count, default=tensorboard_view.DEFAULT_HEIGHT,
                       metavar="PX", help="height of the view in pixels")
    diagnose = commands.add_parser("diagnose", help="where a training step's time goes: "
                                   "input, compute, all-reduce, per worker, and a verdict")
    diagnose.add_argument("--model", metavar="NAME", default=None,
                          help="a compiled model on the workers (default: the last fit's)")
    diagnose.add_argument("--data", metavar="NAME", default=None,
                          help="a tf.data pipeline, or (x, y) arrays, on the workers "
                               "(default: the last fit's)")
    diagnose.add_argument("--batch-size", type=count, default=None, metavar="B",
                          help="global batch size for arrays (default: the last fit's, or 32)")
    diagnose.add_argument("--steps", type=count, default=20, metavar="K",
                          help="steps each part is timed over (default 20)")


def _add_tracking_command(commands) -> None:
    tracking = commands.add_parser("tracking", help="log every run record of the following "
                                   "cells to an experiment tracker (no code in the cells)")
    tracking.add_argument("backend", nargs="?", choices=tracking_settings.BACKENDS,
                          default=None, help="mlflow, or off (none: show the current choice)")
    tracking.add_argument("uri", nargs="?", default=None,
                          help="the MLflow tracking URI (default: sqlite:///mlflow.db beside "
                               "the notebook, MLflow's own default)")
    tracking.add_argument("--experiment", default=tracking_settings.DEFAULT_EXPERIMENT,
                          metavar="NAME", help="the MLflow experiment (default "
                          f"{tracking_settings.DEFAULT_EXPERIMENT!r})")


def _cell_parser() -> Parser:
    parser = Parser(prog="%tfdist", description=(
        "Run the cell on every worker inside the shared strategy's scope."))
    parser.add_argument("--timeout", type=seconds, default=None, metavar="S",
                        help="stop every worker (and restart them) if the cell runs longer")
    parser.add_argument("--out", nargs="+", action="extend", default=[], metavar="NAME",
                        help="copy NAME from the chief into the notebook afterwards")
    parser.add_argument("--push", nargs="+", action="extend", default=[], metavar="NAME",
                        help="send notebook variable NAME to every worker first")
    parser.add_argument("--shard", nargs="+", action="extend", default=[], metavar="NAME",
                        help="split notebook array, DataFrame or Series NAME by rows: worker "
                             "r gets the r-th of N contiguous chunks (all NAMEs aligned)")
    parser.add_argument("--stall-warning", type=seconds, default=60.0, metavar="S",
                        help="name a worker stuck in its own code for S s while the others "
                             "wait (default 60)")
    parser.add_argument("--stall-timeout", type=seconds, default=None, metavar="S",
                        help="stop the cell (like --timeout) when a worker is stuck that long")
    parser.add_argument("--all-output", action="store_true",
                        help="show every worker's stdout (default: the chief's only)")
    parser.add_argument("--no-dashboard", action="store_true",
                        help="no live curves for this cell; Keras prints its own progress")
    parser.add_argument("--raw-progress", action="store_true",
                        help="keep Keras' own progress bars next to the dashboard")
    parser.add_argument("--tensorboard", nargs="?", const="", default=None, metavar="DIR",
                        help="TensorBoard logs for this cell's fit() calls (the chief's), in "
                             "DIR (default ./tfdist_tensorboard/<the run's name>); see "
                             "`%%tfdist tensorboard`")
    parser.add_argument("--no-scope", action="store_true",
                        help="run the cell outside the strategy's scope, as code runs in "
                             "one process (e.g. inference on a model built outside it)")
    parser.add_argument("--name", default=None, metavar="NAME",
                        help="name this cell's run (default run-N); its record and "
                             "checkpoints go to ./tfdist_checkpoints/NAME; see %%tfdist runs")
    parser.add_argument("--no-restore", action="store_true",
                        help="if this cell needs the workers restarted, leave them fresh "
                             "(do not replay the earlier cells)")
    _add_saving_options(parser.add_argument_group("checkpoints and fault tolerance"))
    _add_sweep_options(parser.add_argument_group("sweeps (the cell once per combination, "
                                                 "on the same workers)"))
    return parser


def _add_sweep_options(sweeps) -> None:
    sweeps.add_argument("--sweep", action="append", default=[], metavar="NAME=VALUES",
                        help="bind NAME on every worker before each trial: V1,V2,... (typed "
                             "int, else float, else text; the grid of all --sweep lists) or "
                             "loguniform:LOW:HIGH / uniform:LOW:HIGH (sampled, with --trials)")
    sweeps.add_argument("--trials", type=count, default=None, metavar="K",
                        help="sample K combinations (needs a distribution; listed values "
                             "are then drawn from)")
    sweeps.add_argument("--seed", type=int, default=None, metavar="S",
                        help="seed of the sampling (default: drawn, and shown to repeat it)")
    sweeps.add_argument("--prune", choices=("median",), default=None,
                        help="median: stop a trial whose --monitor at an epoch is worse "
                             "than the median of the earlier trials at that epoch")


def _add_saving_options(saving) -> None:
    saving.add_argument("--checkpoint-dir", metavar="DIR", default=None,
                        help="this run's directory (default: ./tfdist_checkpoints/run-N, or NAME "
                             "with --name)")
    saving.add_argument("--no-checkpoint", action="store_true",
                        help="no checkpoints for this cell's fit() calls")
    saving.add_argument("--checkpoint-every", type=count, default=1, metavar="E",
                        help="save every E epochs (default 1)")
    saving.add_argument("--keep-last", type=count, default=None, metavar="N",
                        help="keep only the N newest checkpoints (with --keep-best: both sets)")
    saving.add_argument("--keep-best", type=count, default=None, metavar="N",
                        help="keep the N best checkpoints by --monitor")
    saving.add_argument("--monitor", default="val_loss", metavar="METRIC",
                        help="metric for --keep-best, --prune and the sweep's table "
                             "(default val_loss, else loss)")
    saving.add_argument("--monitor-mode", choices=MONITOR_MODES, default="auto",
                        help="whether smaller (min) or larger (max) --monitor is better; "
                             "auto (default) decides as Keras' ModelCheckpoint does: max "
                             "for accuracy-like metrics (any name with 'acc', auc, "
                             "precision, recall, f1_score, fbeta_score, iou, r2_score, "
                             "names starting with 'fmeasure'...), min otherwise")
    saving.add_argument("--max-restarts", type=non_negative, default=0, metavar="K",
                        help="if a worker dies (or a collective fails), restart the workers, "
                             "replay earlier cells and resume from the automatic backup, "
                             "up to K times")
    saving.add_argument("--backup-every", type=_backup_frequency, default=None,
                        metavar="epoch|STEPS",
                        help="how often the automatic backup is written (default: each "
                             "epoch, with --max-restarts); alone, it backs up too: the cell run "
                             "again with the same --name/--checkpoint-dir resumes from it")
    saving.add_argument("--grace", type=grace_seconds, default=DEFAULT_GRACE,
                        metavar="S|off",
                        help="a worker sent SIGTERM (a preemption) mid-fit: every worker backs "
                             "up at the next agreed step within S seconds, then the cell "
                             "resumes there (with --max-restarts; default 25, under the 30 s "
                             "a Slurm job or spot VM gets before SIGKILL; off: it ends at "
                             "once)")
    saving.add_argument("--resume-from", metavar="latest|PATH", default=None,
                        help="restore this checkpoint before the first fit() and continue "
                             "from its epoch")


EXAMPLES = """Examples::

  %tfdist start -n 2                 # two workers on this machine
  %%tfdist --keep-best 3 --monitor val_accuracy
  model.fit(dataset, epochs=3)       # runs on every worker; live curves below
  %tfdist checkpoints                # list, compare, restore, resume from, load here
  %tfdist stop                       # end the workers

Reference (generated from the parsers):
"""

LINE_PARSER = _line_parser()
CELL_PARSER = _cell_parser()


def _subcommand(parser: argparse.ArgumentParser, name: str | None):
    """The parser of subcommand `name` of `parser` (None if it has no such one)."""
    return next((action.choices.get(name or "") for action in parser._actions
                 if isinstance(action, argparse._SubParsersAction)), None)


def subcommands() -> argparse._SubParsersAction:
    return next(action for action in LINE_PARSER._actions
                if isinstance(action, argparse._SubParsersAction))


def command_list() -> str:
    names = list(subcommands().choices)
    return ", ".join(names[:-1]) + f" or {names[-1]}"


def help_text() -> str:
    """Help for `%tfdist?`, made from the parsers so it cannot fall out of date."""
    parts = [EXAMPLES, LINE_PARSER.format_help()]
    parts += [sub.format_help() for sub in subcommands().choices.values()]
    parts.append(CELL_PARSER.format_help())
    return "\n".join(parts)
