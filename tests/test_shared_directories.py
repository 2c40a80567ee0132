"""Check-then-create of one directory on every worker (shared_directories.py): the worker
that loses the race is not failed by the directory the other one made."""

import os

import pytest
from tfmw_notebook.worker.writes import shared_directories

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def tolerant_mkdir(monkeypatch):
    """The worker's `os.mkdir`, put back after the test."""
    monkeypatch.setattr(os, "mkdir", os.mkdir)
    shared_directories.install()
    assert os.mkdir is not shared_directories._original_mkdir
    return os.mkdir


@pytest.mark.unit
def test_a_directory_made_by_another_during_the_cell_is_not_an_error(tolerant_mkdir, tmp_path):
    target = tmp_path / "ckpt"
    with shared_directories.during_cell():
        shared_directories._original_mkdir(target)    # the other worker, first
        os.makedirs(target)                           # this one, having seen it missing
        target.joinpath("deeper").mkdir(parents=True)
    assert target.is_dir() and (target / "deeper").is_dir()


@pytest.mark.unit
def test_outside_a_cell_and_for_a_file_mkdir_fails_as_in_one_process(tolerant_mkdir, tmp_path):
    made = tmp_path / "made"
    made.mkdir()
    with pytest.raises(FileExistsError):
        os.makedirs(made)                 # no cell runs
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    with shared_directories.during_cell():
        with pytest.raises(FileExistsError):
            os.makedirs(a_file)
        with pytest.raises(FileExistsError):
            os.mkdir(a_file)


@pytest.mark.unit
def test_a_directory_older_than_the_cell_still_fails(tolerant_mkdir, tmp_path, monkeypatch):
    older = tmp_path / "older"
    older.mkdir()
    began = os.stat(older).st_ctime + 5.0     # the cell began well after it was made
    monkeypatch.setattr(shared_directories.time, "time", lambda: began)
    with shared_directories.during_cell(), pytest.raises(FileExistsError):
        os.makedirs(older)


# Rank 0 looks first and finds nothing; rank 1 then makes the directory; rank 0, going on
# from its check as one process would, makes it too. Files say when each may go on.
CHECK_THEN_CREATE = '''
import os, time
target, looked = {target!r}, {target!r} + ".looked"
if tfdist.rank == 0:
    missing = not os.path.exists(target)
    open(looked, "w").close()
    deadline = time.monotonic() + 60
    while not os.path.isdir(target) and time.monotonic() < deadline:
        time.sleep(0.05)
    if missing:
        os.makedirs(target)
else:
    deadline = time.monotonic() + 60
    while not os.path.exists(looked) and time.monotonic() < deadline:
        time.sleep(0.05)
    if not os.path.exists(target):
        os.makedirs(target)
made = os.path.isdir(target)
'''


def test_the_worker_that_loses_the_check_then_create_race_goes_on(tf_kernel, tmp_path):
    kernel = tf_kernel
    target = str(tmp_path / "ckpt")
    kernel.ok("%%tfdist --no-checkpoint\n" + CHECK_THEN_CREATE.format(target=target),
              timeout=120)
    out = kernel.ok("from tfmw_notebook.magics.session import active_cluster as _active\n"
                    "print([_active().pull(['made'], rank=r)['made'] for r in range(2)])")
    assert out.stdout.strip().splitlines()[-1] == "[True, True]"
