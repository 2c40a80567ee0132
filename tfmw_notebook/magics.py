"""The `%tfdist` / `%%tfdist` magics: a thin layer over TFCluster.

Parsing only, then one call into the cluster layer. No TensorFlow here, so
`%load_ext tfmw_notebook` stays fast. Misuse raises UsageError: IPython shows
its one line and no traceback.
"""

from __future__ import annotations

import argparse
import os

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.core.magic_arguments import MagicArgumentParser
from IPython.utils.process import arg_split

from . import cell_options, tensorboard_view
from .cell_syntax import magics_called
from .cluster import COMMUNICATIONS, RemoteValue, TFCluster
from .errors import BadArgument, TFDistError, WorkerFailed, remote_summary
from .hints import missing_name_hint, private_network_hint, unshared_hosts_hint
from .limits import DEFAULT_TIMEOUT
from .run_options import StallLimits
from .session import NotebookSession, active_cluster, current_session
from .tfconfig import parse_address_map

__all__ = ["TFDistMagics", "LINE_PARSER", "CELL_PARSER", "active_cluster", "stop_active_cluster"]


def stop_active_cluster() -> None:
    session = current_session()
    if session is not None:
        session.stop_cluster()


def _number(convert, name: str, wanted: str, acceptable):
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


_count = _number(int, "a whole number", "a whole number >= 1", lambda value: value >= 1)
_non_negative = _number(int, "a whole number", "0 or more", lambda value: value >= 0)
_seconds = _number(float, "seconds", "seconds > 0", lambda value: value > 0)


class _Parser(MagicArgumentParser):
    """Argument errors as one line that also shows the right usage."""

    def error(self, message):
        # IPython's usage starts with "::" (for its docs) and wraps over lines.
        usage = " ".join(self.format_usage().replace("::", "", 1).split())
        raise UsageError(f"{message} (usage: {usage})")


def _backup_frequency(text: str):
    try:
        return cell_options.backup_frequency(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _address_map(text: str) -> dict[str, str]:
    try:
        return parse_address_map(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_worker_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--timeout", type=_seconds, default=DEFAULT_TIMEOUT, metavar="S",
                        help="seconds to wait for engines and TensorFlow to come up "
                             f"(default {DEFAULT_TIMEOUT:g})")
    parser.add_argument("--communication", choices=COMMUNICATIONS, default="auto",
                        help="collective implementation for MultiWorkerMirroredStrategy")
    parser.add_argument("--gpus-per-worker", type=_non_negative, default=0, metavar="K",
                        help="GPUs each worker sees; 0 (default) hides every GPU")


def _line_parser() -> _Parser:
    parser = _Parser(prog="tfdist", description=(
        "Multi-worker TensorFlow on ipyparallel engines. As a cell magic (%%tfdist) it runs "
        "the cell on every worker inside the shared MultiWorkerMirroredStrategy's scope."))
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    start = commands.add_parser("start", help="start N local engines, one worker each")
    start.add_argument("-n", "--workers", type=_count, default=2, metavar="N",
                       help="number of workers (default 2)")
    _add_worker_options(start)
    start.add_argument("--no-isolation", action="store_true",
                       help="run the workers on this machine's network: their TensorFlow "
                            "ports (no authentication) are then open to other machines")
    _add_attach_command(commands)
    commands.add_parser("status", help="one line per worker: rank, host, pid, alive")
    commands.add_parser("history", help="the last training cell's metrics (per worker, merged)")
    dashboard = commands.add_parser("dashboard", help="turn the live dashboard on or off")
    dashboard.add_argument("state", choices=("on", "off"))
    saving = commands.add_parser("checkpointing", help="turn automatic checkpoints on or off")
    saving.add_argument("state", choices=("on", "off"))
    restore = commands.add_parser("restore", help="after a restart the workers need, replay "
                                  "the earlier cells to give back their state (default on)")
    restore.add_argument("state", choices=("on", "off"))
    picker = commands.add_parser("checkpoints", help="pick a checkpoint: compare, restore on "
                                 "the workers, resume from, load here, delete")
    picker.add_argument("directory", nargs="?", default=None,
                        help="a run directory (default: the last run of this session, "
                             "else the newest under ./tfdist_checkpoints)")
    _add_insight_commands(commands)
    commands.add_parser("restart", help="fresh engine processes, same size; variables are reset "
                        "(nothing is replayed)")
    commands.add_parser("stop", help="end every process the cluster started")
    return parser


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
    attach.add_argument("-n", "--workers", type=_count, default=None, metavar="N",
                        help="wait for N engines (default: use those registered)")
    _add_worker_options(attach)


def _add_insight_commands(commands) -> None:
    """tensorboard and diagnose: looking into the training, not running it."""
    board = commands.add_parser("tensorboard", help="show the TensorBoard logs of this "
                                "session's fits inline (the server stops with the cluster)")
    board.add_argument("directory", nargs="?", default=None,
                       help="a log directory (default: where this session's TensorBoard "
                            "callbacks wrote)")
    board.add_argument("--height", type=_count, default=tensorboard_view.DEFAULT_HEIGHT,
                       metavar="PX", help="height of the view in pixels")
    diagnose = commands.add_parser("diagnose", help="where a training step's time goes: "
                                   "input, compute, all-reduce, per worker, and a verdict")
    diagnose.add_argument("--model", metavar="NAME", default=None,
                          help="a compiled model on the workers (default: the last fit's)")
    diagnose.add_argument("--data", metavar="NAME", default=None,
                          help="a tf.data pipeline, or (x, y) arrays, on the workers "
                               "(default: the last fit's)")
    diagnose.add_argument("--batch-size", type=_count, default=None, metavar="B",
                          help="global batch size for arrays (default: the last fit's, or 32)")
    diagnose.add_argument("--steps", type=_count, default=20, metavar="K",
                          help="steps each part is timed over (default 20)")


def _cell_parser() -> _Parser:
    parser = _Parser(prog="%tfdist", description=(
        "Run the cell on every worker inside the shared strategy's scope."))
    parser.add_argument("--timeout", type=_seconds, default=None, metavar="S",
                        help="stop every worker (and restart them) if the cell runs longer")
    parser.add_argument("--out", nargs="+", action="extend", default=[], metavar="NAME",
                        help="copy NAME from the chief into the notebook afterwards")
    parser.add_argument("--push", nargs="+", action="extend", default=[], metavar="NAME",
                        help="send notebook variable NAME to every worker first")
    parser.add_argument("--stall-warning", type=_seconds, default=60.0, metavar="S",
                        help="name a worker stuck in its own code for S s while the others "
                             "wait (default 60)")
    parser.add_argument("--stall-timeout", type=_seconds, default=None, metavar="S",
                        help="stop the cell (like --timeout) when a worker is stuck that long")
    parser.add_argument("--all-output", action="store_true",
                        help="show every worker's stdout (default: the chief's only)")
    parser.add_argument("--no-dashboard", action="store_true",
                        help="no live curves for this cell; Keras prints its own progress")
    parser.add_argument("--raw-progress", action="store_true",
                        help="keep Keras' own progress bars next to the dashboard")
    parser.add_argument("--tensorboard", nargs="?", const="", default=None, metavar="DIR",
                        help="TensorBoard logs for this cell's fit() calls (the chief's), in "
                             "DIR (default ./tfdist_tensorboard/run-<time>); see "
                             "`%%tfdist tensorboard`")
    parser.add_argument("--no-restore", action="store_true",
                        help="if this cell needs the workers restarted, leave them fresh "
                             "(do not replay the earlier cells)")
    saving = parser.add_argument_group("checkpoints and fault tolerance")
    saving.add_argument("--checkpoint-dir", metavar="DIR", default=None,
                        help="this run's directory (default: ./tfdist_checkpoints/run-<time>)")
    saving.add_argument("--no-checkpoint", action="store_true",
                        help="no checkpoints for this cell's fit() calls")
    saving.add_argument("--checkpoint-every", type=_count, default=1, metavar="E",
                        help="save every E epochs (default 1)")
    saving.add_argument("--keep-last", type=_count, default=None, metavar="N",
                        help="keep only the N newest checkpoints (with --keep-best: both sets)")
    saving.add_argument("--keep-best", type=_count, default=None, metavar="N",
                        help="keep the N best checkpoints by --monitor")
    saving.add_argument("--monitor", default="val_loss", metavar="METRIC",
                        help="metric for --keep-best (default val_loss, else loss)")
    saving.add_argument("--monitor-mode", choices=("min", "max"), default="min",
                        help="whether smaller or larger --monitor is better (default min)")
    saving.add_argument("--max-restarts", type=_non_negative, default=0, metavar="K",
                        help="if a worker dies (or a collective fails), restart the workers, "
                             "replay earlier cells and resume from the automatic backup, "
                             "up to K times")
    saving.add_argument("--backup-every", type=_backup_frequency, default="epoch",
                        metavar="epoch|STEPS",
                        help="how often the automatic backup is written (with --max-restarts)")
    saving.add_argument("--resume-from", metavar="latest|PATH", default=None,
                        help="restore this checkpoint before the first fit() and continue "
                             "from its epoch")
    return parser


LINE_PARSER = _line_parser()
CELL_PARSER = _cell_parser()


@magics_class
class TFDistMagics(Magics):
    """%tfdist / %%tfdist; `session` holds this kernel's cluster, last run and preferences."""

    def __init__(self, shell=None, **kwargs):
        super().__init__(shell, **kwargs)
        self.session = NotebookSession()

    @line_cell_magic
    def tfdist(self, line: str, cell: str | None = None):
        if cell is None:
            return self._line(line)
        return self._cell(line, cell)

    # -- %tfdist COMMAND ------------------------------------------------------

    def _line(self, line: str):
        args = LINE_PARSER.parse_args(arg_split(line))
        if args.command is None:
            raise UsageError(f"%tfdist needs a command: {_command_list()} (see %tfdist?)")
        return getattr(self, f"_{args.command}")(args)

    def _start(self, args):
        self._refuse_second_cluster()
        cluster = self._guarded(lambda: TFCluster.start(
            args.workers, timeout=args.timeout, communication=args.communication,
            gpus_per_worker=args.gpus_per_worker, isolate=not args.no_isolation))
        cluster.restore_state = self.session.preferences.restore
        self.session.cluster = cluster
        print(cluster.describe())

    def _attach(self, args):
        if args.url_file and (args.profile or args.cluster_id):
            raise UsageError("give either --url-file or --profile/--cluster-id, not both")
        old = self.session.cluster
        if old is not None and (not old.size or not old.controller_answers()):
            # Its workers or its controller are gone (after a failure): attach anew.
            old.stop()
            self.session.cluster = None
        self._refuse_second_cluster()
        cluster = self._guarded(lambda: TFCluster.attach(
            profile=args.profile, cluster_id=args.cluster_id, url_file=args.url_file,
            n=args.workers, timeout=args.timeout, communication=args.communication,
            gpus_per_worker=args.gpus_per_worker, interface=args.interface,
            address_map=args.address_map))
        cluster.restore_state = self.session.preferences.restore
        self.session.cluster = cluster
        print(cluster.describe())

    def _status(self, args):
        cluster = self._require_cluster()
        rows = cluster.status()
        if not rows:
            print("no workers (a restart failed?): run `%tfdist restart`")
            return
        print(f"{'rank':>4}  {'host':<16} {'local':>5}  {'address':<22} {'pid':>7}  "
              f"{'alive':<5}  running")
        for row in rows:
            print(f"{row['rank']:>4}  {row['host']:<16} {row['local_rank']:>5}  "
                  f"{row['address']:<22} {row['pid']:>7}  {'yes' if row['alive'] else 'NO':<5}  "
                  f"{row['running'] or '-'}")

    def _history(self, args):
        store = self.session.history
        if store is None:
            raise UsageError("no training has been recorded yet: run a %%tfdist cell that "
                             "calls fit() or tfdist.report() (with the dashboard on)")
        return store

    def _dashboard(self, args):
        self.session.preferences.dashboard = args.state == "on"
        print(f"dashboard {args.state} for the next %%tfdist cells")

    def _checkpointing(self, args):
        self.session.preferences.checkpointing = args.state == "on"
        print(f"automatic checkpoints {args.state} for the next %%tfdist cells")

    def _restore(self, args):
        preferences = self.session.preferences
        preferences.restore = args.state == "on"
        if self.session.cluster is not None:
            self.session.cluster.restore_state = preferences.restore
        if preferences.restore:
            print("restore on: after a restart the earlier %%tfdist cells are replayed, each "
                  "fit() restored from the state it ended with")
        else:
            print("restore off: a restart leaves fresh workers; fit() keeps no end-of-fit state")

    def _checkpoints(self, args):
        from .checkpoint_actions import show_checkpoints

        return show_checkpoints(self.shell, args.directory, self.session)

    def _tensorboard(self, args):
        session, cluster = self.session, self.session.cluster
        known = list(session.tensorboard_dirs)
        if cluster is not None and cluster.size:
            known += self._guarded(cluster.tensorboard_dirs)
        session.tensorboard = self._guarded(lambda: tensorboard_view.shown(
            session.tensorboard, tensorboard_view.logdir_for(args.directory, known,
                                                             cwd=os.getcwd()),
            height=args.height))
        return session.tensorboard

    def _diagnose(self, args):
        cluster = self._require_cluster()
        return self._guarded(lambda: cluster.diagnose(
            model=args.model, data=args.data, batch_size=args.batch_size, steps=args.steps))

    def _restart(self, args):
        cluster = self._require_cluster()
        self._guarded(cluster.restart)
        print(f"restarted: {cluster.size} fresh workers in {cluster.last_restart_seconds:.1f} s "
              "(their variables were reset)")

    def _stop(self, args):
        cluster = self._require_cluster()
        size, owned = cluster.size, cluster.owned
        self.session.stop_cluster()
        if owned:
            print(f"stopped {size} workers")
        else:
            print(f"let go of {size} workers; the attached cluster keeps running (stop it "
                  "where it was started, e.g. `ipcluster stop`)")

    # -- %%tfdist -------------------------------------------------------------

    def _cell(self, line: str, cell: str):
        args = CELL_PARSER.parse_args(arg_split(line))
        if not cell.strip():
            raise UsageError("the %%tfdist cell is empty: write the code to run on every "
                             "worker below the %%tfdist line")
        cluster = self._require_cluster()
        source = self._check_syntax(cell)
        self._check_magics(cluster, source)
        pushed = self._collect_push(args.push)
        if pushed:
            self._guarded(lambda: cluster.push(pushed))
        session, preferences = self.session, self.session.preferences
        try:
            options, run_dir = cell_options.build(
                args, dashboard=preferences.dashboard, checkpointing=preferences.checkpointing,
                resume_next=session.resume_next, cwd=os.getcwd())
        except ValueError as exc:  # no checkpoint to resume from, a bad option value
            raise UsageError(str(exc)) from None
        if options.tensorboard and options.tensorboard not in session.tensorboard_dirs:
            session.tensorboard_dirs.append(options.tensorboard)
        live = None
        if options.report:
            from .widgets.live import LiveRun

            live = LiveRun(widgets=getattr(self.shell, "kernel", None) is not None)
        try:
            result = self._guarded(lambda: cluster.run(
                cell, timeout=args.timeout, all_output=args.all_output, options=options,
                max_restarts=args.max_restarts, restore=False if args.no_restore else None,
                stall=StallLimits(args.stall_warning, args.stall_timeout),
                on_data=live.on_data if live is not None else None,
                on_stall=live.on_stall if live is not None else None))
            session.resume_next = None
        except WorkerFailed as failure:
            hint = (missing_name_hint(failure.error_name, failure.error_value, self.shell.user_ns)
                    or unshared_hosts_hint(failure.error_name, failure.error_value,
                                           [w.host for w in cluster.workers])
                    or private_network_hint(failure.error_value, cluster.in_private_network))
            if hint:
                failure.add_hint(hint)
            raise
        finally:
            if run_dir and os.path.isdir(run_dir):
                session.last_run = run_dir
            if live is not None:
                live.finish()
                if live.store.ranks:
                    session.history = live.store
        if args.out:
            self._copy_out(cluster, args.out)
        if result.display is not None:
            return RemoteValue(result.display)
        return None

    def _check_syntax(self, cell: str) -> str:
        """The cell as IPython transforms it, if it compiles; else a UsageError."""
        source = self.shell.transform_cell(cell)
        try:
            compile(source, "<tfdist cell>", "exec")
        except SyntaxError as exc:
            where = f"line {exc.lineno}" if exc.lineno else "the cell"
            text = f": {exc.text.strip()}" if exc.text and exc.text.strip() else ""
            raise UsageError(f"SyntaxError at {where} ({exc.msg}){text}; "
                             "nothing was sent to the workers") from None
        return source

    def _check_magics(self, cluster: TFCluster, source: str) -> None:
        called = magics_called(source)
        if not called:
            return
        missing = self._guarded(lambda: cluster.missing_magics(called))
        if missing:
            names = ", ".join(f"`{name}`" for name in missing)
            raise UsageError(f"{names} {'is' if len(missing) == 1 else 'are'} a magic of this "
                             "notebook, not of the workers: run it in a cell without %%tfdist; "
                             "nothing was sent to the workers")

    def _collect_push(self, names: list[str]) -> dict:
        from ipyparallel.serialize import serialize_object

        namespace = self.shell.user_ns
        values = {}
        for name in names:
            if name not in namespace:
                raise UsageError(f"--push {name}: the notebook has no variable named {name!r}; "
                                 "define it first or check the spelling")
            try:
                serialize_object(namespace[name])
            except Exception as exc:
                raise UsageError(
                    f"--push {name}: it cannot be sent to the workers "
                    f"({type(exc).__name__}: {exc}); push the data it is made from instead"
                ) from None
            values[name] = namespace[name]
        return values

    def _copy_out(self, cluster: TFCluster, names: list[str]) -> None:
        missing = self._guarded(lambda: cluster.missing_on_chief(names))
        if missing:
            raise UsageError(
                f"--out {' '.join(missing)}: the chief has no variable named "
                f"{missing[0]!r} after the cell ran; assign it in the cell or drop --out")
        try:
            values = cluster.pull(names)
        except Exception as exc:
            summary = remote_summary(exc)
            if not _is_serialization_error(exc):
                raise TFDistError(f"--out {' '.join(names)}: could not copy it from the "
                                  f"chief: {summary}") from None
            raise UsageError(
                f"--out {' '.join(names)}: it cannot be sent from the chief ({summary}); "
                "copy plain data (numbers, arrays, weights) instead") from None
        self.shell.user_ns.update(values)

    # -- helpers --------------------------------------------------------------

    def _refuse_second_cluster(self) -> None:
        cluster = self.session.cluster
        if cluster is not None:
            raise UsageError(f"a cluster of {cluster.size} workers is already running: "
                             "`%tfdist stop` it first, or `%tfdist restart` for fresh workers")

    def _require_cluster(self) -> TFCluster:
        cluster = self.session.cluster
        if cluster is None:
            raise UsageError("no cluster is running: start one with `%tfdist start -n 2` "
                             "(or use a running one with `%tfdist attach`)")
        return cluster

    @staticmethod
    def _guarded(action):
        """Arguments the API refused are the user's input: show them as usage errors."""
        try:
            return action()
        except BadArgument as exc:
            raise UsageError(str(exc)) from None


def _is_serialization_error(exc: BaseException) -> bool:
    name = getattr(exc, "ename", "") or type(exc).__name__
    text = str(getattr(exc, "evalue", "") or exc).lower()
    return name in ("PicklingError", "TypeError", "AttributeError") or "pickl" in text


def _command_list() -> str:
    names = list(_subcommands().choices)
    return ", ".join(names[:-1]) + f" or {names[-1]}"


def _subcommands() -> argparse._SubParsersAction:
    return next(action for action in LINE_PARSER._actions
                if isinstance(action, argparse._SubParsersAction))


def _help() -> str:
    """Help for `%tfdist?`, made from the parsers so it cannot fall out of date."""
    commands = _subcommands()
    parts = [LINE_PARSER.format_help()]
    parts += [sub.format_help() for sub in commands.choices.values()]
    parts.append(CELL_PARSER.format_help())
    return "\n".join(parts)


TFDistMagics.tfdist.__doc__ = _help()
