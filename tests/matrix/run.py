"""The support matrix, tested: one virtualenv per row of versions, the same smoke in each.

    python tests/matrix/run.py                   # oldest, middle, current
    python tests/matrix/run.py oldest            # one row (what CI runs beside the suite)
    python tests/matrix/run.py --nightly         # the three rows and the nightlies

Each row's virtualenv (under --venvs, default ~/.cache/tfmw-matrix) holds the row's pinned
TensorFlow, tf-keras, Keras, IPython, ipyparallel and numpy, this package's other
dependencies and what the smoke needs; it is made once and kept while its requirements stay
the same (a stamp file holds them), so a second run installs nothing (a first one downloads
the row's wheels: about 3 minutes here). This checkout is not installed there: it reaches the
row's Python, its kernels and engines through PYTHONPATH, so one virtualenv serves every
checkout.

The smoke, fixed for every row (about 4 minutes on 2 cores): tests/matrix/test_smoke.py (the
start, the seed tutorial's code, a Keras 3 fit with checkpoints and a killed worker, a
restore), the quickstart notebook under nbval, and three corpus programs (TensorFlow's
multi-worker tutorial, Ray Train's TensorFlow quickstart, keras.io's MNIST convnet). Each
row's result, versions and times go to test-output/matrix/<row>.json and one line each at
the end; the exit status is 1 if any row failed. Needs Python 3.11 or newer (tomllib).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass

import ci_wait
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INSTALL_SECONDS = 1800     # a first install downloads TensorFlow (hundreds of MB)
SMOKE_SECONDS = 1800


@dataclass(frozen=True)
class Row:
    name: str
    pins: tuple[str, ...]
    why: str


ROWS = {
    "oldest": Row("oldest", ("tensorflow==2.16.2", "tf-keras==2.16.0", "keras==3.15.1",
                             "ipyparallel==8.6.1", "ipython==8.10.0", "numpy==1.26.4"),
                  "the lower bounds pyproject.toml promises (DESIGN fact 32)"),
    "middle": Row("middle", ("tensorflow==2.19.*", "tf-keras==2.19.*", "keras==3.13.2",
                             "ipyparallel==8.8.*", "ipython==8.*"),
                  "a TensorFlow and a Keras between the two"),
    "current": Row("current", ("tensorflow", "tf-keras", "keras", "ipyparallel", "ipython",
                               "numpy"), "the newest releases"),
    "nightly": Row("nightly", ("tf-nightly", "tf-keras-nightly", "keras-nightly"),
                   "the next releases (tf-nightly, tf-keras-nightly, keras-nightly)"),
}
DEFAULT_ROWS = ("oldest", "middle", "current")

# What the smoke's tests import besides the package's own dependencies.
# (The corpus' one-process runs are forked from a process that imports pandas first.)
SMOKE_REQUIREMENTS = ("pytest>=7", "pytest-timeout>=2.1", "nbval>=0.11", "ipykernel>=6",
                      "jupyter_client>=8", "scikit-learn>=1.3", "pandas>=1.5", "psutil")
SMOKE = ("tests/matrix/test_smoke.py", "notebooks/01_quickstart.ipynb",
         "tests/test_corpus.py::test_program[tf_multi_worker_with_keras]",
         "tests/test_corpus.py::test_program[ext_ray_tensorflow_quickstart]",
         "tests/test_corpus.py::test_program[kio_mnist_convnet]")
# The versions a row's log and JSON name (distributions; the nightlies under their names).
REPORTED = ("tensorflow", "tf-nightly", "tf-keras", "tf-keras-nightly", "keras",
            "keras-nightly", "ipyparallel", "ipython", "numpy")


def requirements(row: Row) -> list[str]:
    """The row's pins, then this package's dependencies and the smoke's (pip meets both)."""
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as file:
        own = tomllib.load(file)["project"]["dependencies"]
    return [*row.pins, *own, *SMOKE_REQUIREMENTS]


def venv_for(row: Row, venvs: str, reinstall: bool) -> tuple[str, float]:
    """The row's virtualenv's Python, made or reused; and the seconds its install took."""
    wanted = requirements(row)
    stamp_text = json.dumps({"python": sys.version.split()[0], "requirements": wanted})
    path = os.path.join(venvs, row.name)
    stamp = os.path.join(path, "tfmw-matrix-stamp.json")
    python = os.path.join(path, "bin", "python")
    if not reinstall and os.path.exists(stamp) and open(stamp).read() == stamp_text:
        return python, 0.0
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", "--clear", path], check=True, timeout=300)
    subprocess.run([python, "-m", "pip", "install", "--quiet", *wanted], check=True,
                   timeout=INSTALL_SECONDS)
    with open(stamp, "w") as file:
        file.write(stamp_text)
    return python, time.monotonic() - started


def installed_versions(python: str) -> dict[str, str]:
    code = ("import importlib.metadata as m, json\nfound = {}\n"
            f"for name in {list(REPORTED)!r}:\n"
            "    try:\n        found[name] = m.version(name)\n"
            "    except m.PackageNotFoundError:\n        pass\nprint(json.dumps(found))")
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True,
                         timeout=120)
    return json.loads(out.stdout)


def run_smoke(row: Row, python: str) -> tuple[int, str]:
    """pytest on the smoke in the row's Python; its exit status and closing line."""
    env = dict(os.environ, TFMW_MATRIX_ROW=row.name,
               PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    env.pop(ci_wait.VARIABLE, None)    # the suite waits for this run; this run waits for none
    command = [python, "-m", "pytest", "-p", "no:cacheprovider", *SMOKE]
    try:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True)
        closing = _relay(process, f"[{row.name}] ", time.monotonic() + SMOKE_SECONDS)
    except subprocess.TimeoutExpired:
        return 124, f"the smoke ran past {SMOKE_SECONDS} s"
    return process.returncode, closing


def _relay(process: subprocess.Popen, prefix: str, deadline: float) -> str:
    """Print the process's lines with `prefix` until it ends; its last non-empty line."""
    last = ""
    assert process.stdout is not None
    for line in process.stdout:
        print(prefix + line, end="", flush=True)
        last = line.strip() or last
        if time.monotonic() > deadline:
            process.kill()
            process.wait(timeout=60)
            raise subprocess.TimeoutExpired(process.args, SMOKE_SECONDS)
    process.wait(timeout=60)
    return last.strip("= ")


def run_row(row: Row, venvs: str, reinstall: bool) -> dict:
    started = time.monotonic()
    result = {"row": row.name, "why": row.why, "pins": list(row.pins),
              "date": datetime.date.today().isoformat()}
    try:
        python, result["install_seconds"] = venv_for(row, venvs, reinstall)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        return {**result, "result": "failed", "summary": f"install failed: {exc}",
                "seconds": round(time.monotonic() - started)}
    result["versions"] = installed_versions(python)
    code, closing = run_smoke(row, python)
    return {**result, "result": "passed" if code == 0 else "failed", "summary": closing,
            "seconds": round(time.monotonic() - started),
            "install_seconds": round(result["install_seconds"])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rows", nargs="*", metavar="ROW",
                        help=f"{', '.join(ROWS)} (default: {', '.join(DEFAULT_ROWS)})")
    parser.add_argument("--nightly", action="store_true", help="also the nightlies' row")
    parser.add_argument("--venvs", default=os.path.expanduser("~/.cache/tfmw-matrix"),
                        help="where the rows' virtualenvs are kept")
    parser.add_argument("--reinstall", action="store_true", help="make the virtualenvs anew")
    args = parser.parse_args(argv)
    unknown = [name for name in args.rows if name not in ROWS]
    if unknown:
        parser.error(f"no row {', '.join(unknown)}: the rows are {', '.join(ROWS)}")
    names = list(args.rows or DEFAULT_ROWS) + (["nightly"] if args.nightly else [])
    out_dir = os.path.join(ROOT, "test-output", "matrix")
    os.makedirs(out_dir, exist_ok=True)
    results = []
    for name in dict.fromkeys(names):
        result = run_row(ROWS[name], args.venvs, args.reinstall)
        with open(os.path.join(out_dir, f"{name}.json"), "w") as file:
            json.dump(result, file, indent=1)
        results.append(result)
    for result in results:
        versions = ", ".join(f"{k} {v}" for k, v in result.get("versions", {}).items())
        print(f"matrix {result['row']}: {result['result']} ({result['summary']}) in "
              f"{result['seconds']} s, install {result.get('install_seconds', '?')} s; "
              f"{versions}")
    return 0 if all(result["result"] == "passed" for result in results) else 1


if __name__ == "__main__":
    sys.exit(main())
