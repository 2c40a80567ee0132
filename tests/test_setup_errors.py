"""Workers whose Python lacks tf-keras or TensorFlow: a clear error, nothing left running.

Real engines, really missing packages: the engines inherit the environment of
the process that starts them, so a `sitecustomize.py` on PYTHONPATH hides the
package in every engine the way an environment without it would (import fails,
`importlib.util.find_spec` returns None).
"""

import importlib.metadata
import os
import subprocess
import sys
import textwrap
import threading
import time

import psutil
import pytest
from tfmw_notebook import ClusterSetupError, TFCluster

pytestmark = pytest.mark.timeout(240)

_BLOCKER = textwrap.dedent('''
    """Test helper: make the packages in HIDDEN look uninstalled."""
    import sys

    HIDDEN = {hidden!r}


    class _Hiding:
        """Wraps a finder; unknown to it are the hidden packages and their submodules."""

        def __init__(self, inner):
            self._inner = inner

        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in HIDDEN:
                return None
            find = getattr(self._inner, "find_spec", None)
            return None if find is None else find(name, path, target)

        def __getattr__(self, attr):
            return getattr(self._inner, attr)


    sys.meta_path[:] = [_Hiding(finder) for finder in sys.meta_path]
    for _name in list(sys.modules):
        if _name.partition(".")[0] in HIDDEN:
            del sys.modules[_name]
''')


def _write_blocker(tmp_path, hidden: str) -> str:
    folder = tmp_path / f"hide-{hidden}"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(_BLOCKER.format(hidden=[hidden]))
    return str(folder)


def _pythonpath_with(folder: str) -> str:
    existing = os.environ.get("PYTHONPATH")
    return folder + (os.pathsep + existing if existing else "")


def _check_blocker_works(pythonpath: str, hidden: str) -> None:
    """The venv's Python imports our sitecustomize and the package looks absent."""
    probe = ("import sys, importlib.util\n"
             "assert 'sitecustomize' in sys.modules, 'sitecustomize not imported'\n"
             f"assert importlib.util.find_spec({hidden!r}) is None, 'find_spec still finds it'\n"
             "try:\n"
             f"    import {hidden}\n"
             "except ModuleNotFoundError:\n"
             "    print('hidden')\n")
    env = dict(os.environ, PYTHONPATH=pythonpath)
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "hidden", done.stderr


def _processes_with(marker: str, exclude: set[int] = frozenset()) -> list[psutil.Process]:
    """Live processes (not zombies) whose PYTHONPATH holds `marker`: the ones we caused."""
    found = []
    for proc in psutil.process_iter():
        if proc.pid in exclude or proc.pid == os.getpid():
            continue
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if marker in proc.environ().get("PYTHONPATH", ""):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def _wait_none_left(marker: str, exclude: set[int] = frozenset(), timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        left = _processes_with(marker, exclude)
        if not left:
            return
        if time.monotonic() > deadline:
            described = []
            for proc in left:
                try:
                    described.append(f"{proc.pid} {' '.join(proc.cmdline())}")
                except psutil.Error:
                    described.append(str(proc.pid))
            pytest.fail(f"processes left behind after the failed start: {described}")
        time.sleep(0.2)


class _Sampler:
    """Records, in the background, which of our processes exist while a start runs.

    Proves the "nothing left behind" check looks at the right processes.
    """

    def __init__(self, marker: str, exclude: set[int] = frozenset()):
        self.marker, self.exclude = marker, exclude
        self.seen: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            self.seen.update(p.pid for p in _processes_with(self.marker, self.exclude))
            self._stop.wait(0.1)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=10)


@pytest.fixture
def hide(tmp_path, monkeypatch):
    """hide("tf_keras") -> the blocker folder, now first on the PYTHONPATH engines inherit."""

    def install(hidden: str) -> str:
        folder = _write_blocker(tmp_path, hidden)
        pythonpath = _pythonpath_with(folder)
        _check_blocker_works(pythonpath, hidden)
        monkeypatch.setenv("PYTHONPATH", pythonpath)
        return folder

    return install


def test_missing_tf_keras_fails_start_with_pip_hint(hide):
    marker = hide("tf_keras")
    tf_version = importlib.metadata.version("tensorflow")
    pin = ".".join(tf_version.split(".")[:2]) + ".*"
    began = time.monotonic()
    with _Sampler(marker) as sampler, pytest.raises(ClusterSetupError) as info:
        TFCluster.start(2, timeout=90, keras=2)
    message = str(info.value)
    assert "tf-keras is not installed in the engines' Python" in message
    assert f"TensorFlow {tf_version}" in message
    assert "or start with `--keras 3`" in message
    assert f"pip install 'tf-keras=={pin}'" in message
    assert "bootstrap failed on engine" in message
    assert "\n" not in message  # one line, shown without a client traceback
    assert info.value._render_traceback_() == [f"ClusterSetupError: {message}"]
    assert time.monotonic() - began < 60  # failed fast: no wait for a timeout
    assert len(sampler.seen) >= 3  # controller and both engines ran with the blocker
    _wait_none_left(marker)


def test_missing_tensorflow_fails_start_with_pip_hint(hide):
    marker = hide("tensorflow")
    began = time.monotonic()
    with _Sampler(marker) as sampler, pytest.raises(ClusterSetupError) as info:
        TFCluster.start(2, timeout=90)
    message = str(info.value)
    assert "TensorFlow is not installed in the engines' Python" in message
    # The default start needs tf-keras too, so the hint installs both.
    assert "run `pip install tensorflow tf-keras` in that environment" in message
    assert "bootstrap failed on engine" in message
    assert "\n" not in message
    assert time.monotonic() - began < 60  # failed fast: no wait for a timeout
    assert len(sampler.seen) >= 3  # controller and both engines ran with the blocker
    _wait_none_left(marker)


def test_magic_start_error_then_a_clean_start(hide):
    """Through the magic in a real kernel: the pip hint, no half-registered cluster."""
    from kernel_session import KernelSession

    original = os.environ.get("PYTHONPATH")
    marker = hide("tf_keras")
    kernel = KernelSession(env={"PYTHONPATH": os.environ["PYTHONPATH"]})
    try:
        exclude = {kernel.kernel_pid()}
        kernel.ok("%load_ext tfmw_notebook", timeout=60)
        with _Sampler(marker, exclude) as sampler:
            # The default start needs tf-keras.
            out = kernel.execute("%tfdist start -n 2 --timeout 90", timeout=120)
        assert out.status == "error"
        assert out.error["ename"] == "ClusterSetupError"
        assert "tf-keras is not installed" in out.error["evalue"]
        assert "pip install 'tf-keras==" in out.error["evalue"]
        # One line, no client-side traceback.
        assert out.error["traceback"] == [f"ClusterSetupError: {out.error['evalue']}"]
        assert len(sampler.seen) >= 3
        _wait_none_left(marker, exclude)
        check = kernel.ok("from tfmw_notebook.magics.session import active_cluster\n"
                          "print(active_cluster() is None)")
        assert check.stdout.strip() == "True"

        # Without the blocker the next start is allowed and works.
        restore = (f"os.environ['PYTHONPATH'] = {original!r}" if original is not None
                   else "os.environ.pop('PYTHONPATH', None)")
        kernel.ok(f"import os\n{restore}")
        started = kernel.ok("%tfdist start -n 2", timeout=180)
        assert "2 workers ready" in started.stdout
        ran = kernel.ok("%%tfdist\ntf.keras.__name__.split('.')[0]", timeout=60)
        assert ran.results[-1]["text/plain"] == "'tf_keras'"   # tf-keras, the default
        kernel.ok("%tfdist stop", timeout=60)
    finally:
        try:
            kernel.execute("from tfmw_notebook.magics.session import stop_active_cluster\n"
                           "stop_active_cluster()",
                           timeout=60)
        finally:
            kernel.shutdown()
