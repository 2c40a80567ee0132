"""Reading the cluster file `ipcluster start` writes, while it may still be writing it.

ipcluster writes its cluster file when the controller is up and again as each engine set
starts, in place: a notebook that attaches at that moment reads a file cut short (measured:
`%tfdist attach` right after `ipcluster start` with MPI engines failed on "Expecting value:
line 1 column 1"). A file that does not parse is read again until it does, for a moment.
"""

from __future__ import annotations

import logging
import time

import ipyparallel as ipp

from .limits import POLL_SECONDS

REWRITE_SECONDS = 5.0   # longer than any rewrite takes: then the file is broken


def read_cluster(profile_dir: str, cluster_id: str, seconds: float = REWRITE_SECONDS
                 ) -> ipp.Cluster:
    """The cluster its file describes (quiet: its INFO lines would land in a cell's output).
    FileNotFoundError when there is none; the ValueError of a file that stays unreadable."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return ipp.Cluster.from_file(profile_dir=profile_dir, cluster_id=cluster_id,
                                         log_level=logging.ERROR)
        except ValueError:   # json's error for a file cut short
            if time.monotonic() > deadline:
                raise
            time.sleep(POLL_SECONDS)
