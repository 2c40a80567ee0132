import atexit
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

sys.path.insert(0, os.path.dirname(__file__))

# Keep ipyparallel's profiles, cluster files and logs out of the user's ~/.ipython, and each
# process of the run out of the other's: xdist's processes inherit the environment of the
# process that starts them, which has run this file already (two recipe tests writing the
# same profile's ipcluster_config.py at once failed a CI run).
_IPYTHONDIR = tempfile.mkdtemp(prefix="tfmw-test-ipython-")
os.environ["IPYTHONDIR"] = _IPYTHONDIR
atexit.register(shutil.rmtree, _IPYTHONDIR, ignore_errors=True)


@pytest.fixture(scope="session")
def ipython_dir():
    return os.environ["IPYTHONDIR"]


@pytest.fixture(scope="session")
def tf_kernel(tmp_path_factory):
    """One real kernel with a real 2-worker cluster, shared by the tests that allow it.

    It runs in a temporary directory: fit() saves checkpoints under the working directory.
    """
    from kernel_session import kernel_with_cluster

    with kernel_with_cluster(str(tmp_path_factory.mktemp("tf-kernel"))) as session:
        yield session


@pytest.fixture
def small_shared_memory():
    """A 1 MiB tmpfs: what a container's small /dev/shm looks like."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (CI runs as root)")
    directory = tempfile.mkdtemp(prefix="tfmw-small-shm-")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", directory], check=True)
    try:
        yield directory
    finally:
        subprocess.run(["umount", directory], check=True)
        os.rmdir(directory)


@pytest.fixture(scope="session")
def terminal_shell():
    """IPython's in-process test shell (a terminal shell: no kernel, no widgets).

    It can be started once per process; later calls to the getter imported from
    globalipapp would return None, so every test takes it from here.
    """
    from IPython.testing import globalipapp

    globalipapp.start_ipython()
    shell = globalipapp.get_ipython()
    shell.run_line_magic("load_ext", "tfmw_notebook")
    return shell


@pytest.fixture
def ip(terminal_shell, monkeypatch):
    """The terminal shell with a fresh session: no cluster and no recorded training,
    whatever ran before."""
    from tfmw_notebook.magics.session import NotebookSession

    magics = terminal_shell.magics_manager.registry["TFDistMagics"]
    monkeypatch.setattr(magics, "session", NotebookSession())
    return terminal_shell


def pytest_collection_modifyitems(config, items):
    """Every test is `unit` (pure, seconds, no engines: its module says so) or `cluster`
    (real engines and TensorFlow): `-m unit` runs the fast part alone."""
    # Scale tests take minutes each and fill the machine: only when `-m` names them.
    scale_asked = "scale" in (config.option.markexpr or "")
    for item in items:
        if item.get_closest_marker("unit") is None:
            item.add_marker(pytest.mark.cluster)
        if item.get_closest_marker("scale") is not None and not scale_asked:
            item.add_marker(pytest.mark.skip(reason="a scale test: run with `pytest -m scale`"))


_MACHINE_SHARE = pytest.StashKey()


def pytest_configure(config):
    from machine_share import MachineShare
    from matrix.ci_wait import wait_for_matrix_row

    wait_for_matrix_row(config)   # CI: its oldest-row smoke ends before the suite starts
    config.stash[_MACHINE_SHARE] = MachineShare(config)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    """Outside the timeout plugin's timer: waiting for the test beside is not this test's time."""
    with item.config.stash[_MACHINE_SHARE].around(item, nextitem):
        yield
