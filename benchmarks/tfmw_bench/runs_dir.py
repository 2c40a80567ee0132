"""A scratch directory for the experiments benchmarks, removed at exit.

The process works in it: the magic writes run records (and any checkpoints) under
./tfdist_checkpoints, and ipyparallel its profile under IPYTHONDIR, both kept out of the
user's directories.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile


def scratch_directory(prefix: str) -> str:
    workdir = tempfile.mkdtemp(prefix=prefix)
    # Registered before any ipyparallel Cluster exists, so it runs after their own atexit
    # stop (which still needs the profile directory).
    atexit.register(shutil.rmtree, workdir, ignore_errors=True)
    os.environ["IPYTHONDIR"] = os.path.join(workdir, "ipython")
    os.chdir(workdir)
    return workdir
