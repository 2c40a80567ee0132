"""`%tfdist start | attach | status | restart | stop`: the cluster's life."""

from __future__ import annotations

from IPython.core.error import UsageError

from ..cluster.cells.shrink import floor_problem
from ..cluster.tfcluster import TFCluster
from ..widgets.figures import import_matplotlib_in_background
from .base import CommandBase


class LifecycleCommands(CommandBase):

    def _start(self, args) -> None:
        old = self.session.cluster
        if old is not None and not old.size:
            # A failed restart left it empty; its error said to start again.
            self.session.stop_cluster()
            print(f"the cluster had no workers left (a restart failed?): starting "
                  f"{args.workers} new ones in its place")
        self._refuse_second_cluster()
        too_few = floor_problem(args.min_workers, args.workers)
        if too_few:
            raise UsageError(too_few)
        cluster = self._guarded(lambda: TFCluster.start(
            args.workers, timeout=args.timeout, communication=args.communication,
            gpus_per_worker=args.gpus_per_worker, isolate=not args.no_isolation,
            keras=args.keras, standby=args.standby))
        cluster.min_workers = args.min_workers
        self._adopt(cluster)
        if args.standby:
            print(f"{args.standby} spare engines start in the background: a restart takes "
                  "them, with TensorFlow already imported")

    def _attach(self, args) -> None:
        if args.url_file and (args.profile or args.cluster_id):
            raise UsageError("give either --url-file or --profile/--cluster-id, not both")
        if args.standby and args.url_file:
            raise UsageError("--standby launches spare engines through the cluster's "
                             "launcher, which a connection file does not name: attach with "
                             "--profile (and --cluster-id), or without --standby")
        if args.workers is not None and floor_problem(args.min_workers, args.workers):
            raise UsageError(floor_problem(args.min_workers, args.workers))
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
            address_map=args.address_map, keras=args.keras, standby=args.standby))
        self._adopt(cluster)
        if args.standby:
            print(f"{args.standby} spare engines start in the background through the "
                  "cluster's launcher: a restart takes them, with TensorFlow already imported")
        # The size is known once attached: a floor above it is refused, the cluster kept.
        too_few = floor_problem(args.min_workers, cluster.size)
        if too_few:
            raise UsageError(f"{too_few}; the cluster is attached without it")
        cluster.min_workers = args.min_workers

    def _adopt(self, cluster: TFCluster) -> None:
        cluster.restore_state = self.session.preferences.restore
        self.session.cluster = cluster
        print(cluster.describe())
        import_matplotlib_in_background()   # before the first cell's dashboard needs it

    def _status(self, args) -> None:
        cluster = self._require_cluster()
        rows = cluster.status()
        if not rows:
            print("no workers (a restart failed?): run `%tfdist restart`")
            return
        print(f"{'rank':>4}  {'host':<16} {'local':>5}  {'address':<22} {'pid':>7}  "
              f"{'alive':<5}  {'devices':<12} running")
        for row in rows:
            print(f"{row['rank']:>4}  {row['host']:<16} {row['local_rank']:>5}  "
                  f"{row['address']:<22} {row['pid']:>7}  {'yes' if row['alive'] else 'NO':<5}  "
                  f"{row['devices']:<12} {row['running'] or '-'}")

    def _restart(self, args) -> None:
        cluster = self._require_cluster()
        if args.keras is None:
            self._guarded(cluster.restart)
            print(f"restarted: {cluster.size} fresh workers in "
                  f"{cluster.last_restart_seconds:.1f} s (their variables were reset)")
            return
        report = self._guarded(lambda: cluster.restart(keras=args.keras))
        given_back = (report.line() if report is not None else
                      "nothing to replay: their variables were reset")
        print(f"restarted: {cluster.size} fresh workers running {cluster.keras_version} "
              f"(TensorFlow {cluster.tf_version}) in {cluster.last_restart_seconds:.1f} s; "
              f"{given_back}")

    def _resize(self, args) -> None:
        cluster = self._require_cluster()
        before = cluster.size
        report = self._guarded(lambda: cluster.resize(args.workers))
        given_back = (report.line() if report is not None else
                      "nothing replayed: their variables are empty")
        print(f"resized: {cluster.size} workers (were {before}) in "
              f"{cluster.last_restart_seconds:.1f} s; {given_back}. A dataset batched before "
              f"it is distributed keeps its global batch: each worker now takes 1/{cluster.size}"
              " of it")

    def _stop(self, args) -> None:
        cluster = self._require_cluster()
        size, owned = cluster.size, cluster.owned
        self.session.stop_cluster()
        if owned:
            print(f"stopped {size} workers")
        else:
            print(f"let go of {size} workers; the attached cluster keeps running (stop it "
                  "where it was started, e.g. `ipcluster stop`)")

    def _refuse_second_cluster(self) -> None:
        cluster = self.session.cluster
        if cluster is not None:
            raise UsageError(f"a cluster of {cluster.size} workers is already running: "
                             "`%tfdist stop` it first, or `%tfdist restart` for fresh workers")
