"""`%tfdist tracking mlflow [URI] | off`: where the following cells' run records are logged."""

from __future__ import annotations

from IPython.core.error import UsageError

from ..cluster.runs import tracking
from .base import CommandBase


class TrackingCommands(CommandBase):

    def _tracking(self, args) -> None:
        if args.backend is None:             # `%tfdist tracking`: what is on now
            print(self.session.tracking.describe())
            return
        if args.backend == "off" and args.uri is not None:
            raise UsageError(f"`%tfdist tracking off` takes no URI (got {args.uri!r})")
        self.session.tracking = self._guarded(
            lambda: tracking.configure(args.backend, args.uri, args.experiment))
        print(f"{self.session.tracking.describe()}: for the runs of the next %%tfdist cells")
