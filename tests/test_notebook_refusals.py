"""A magic refused in a tutorial fails the notebook test (notebooks/conftest.py).

Small notebooks run through the same nbval machinery and the same conftest as
notebooks/*.ipynb, in a pytest of their own: a refused `%tfdist start -n 0` fails its
cell, passes when the cell is tagged `raises-usage-error`, and the tag on a cell that
is not refused fails it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ElementTree

import nbformat

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REFUSED = "%tfdist start -n 0"


def notebook(path: str, cells: list[tuple[str, list[str]]]) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source, metadata={"tags": tags} if tags else {})
                for source, tags in cells]
    nbformat.write(nb, path)


def outcomes(directory) -> dict[tuple[str, str], str]:
    """{(notebook, cell): 'passed' | 'failed'} of one nbval run of `directory`."""
    shutil.copy(os.path.join(ROOT, "notebooks", "conftest.py"), directory)
    (directory / "pytest.ini").write_text("[pytest]\n")
    report = directory / "report.xml"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-c",
         str(directory / "pytest.ini"), "--rootdir", str(directory), "--nbval",
         "--nbval-current-env", "--nbval-cell-timeout", "60", f"--junitxml={report}",
         str(directory)],
        capture_output=True, text=True, timeout=180, cwd=directory,
        env={**os.environ, "PYTHONPATH": ROOT})
    assert report.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    found = {}
    for case in ElementTree.parse(report).iter("testcase"):
        failed = case.find("failure") is not None or case.find("error") is not None
        name = os.path.basename(case.get("file") or case.get("classname", ""))
        found[(name.split(".")[0], case.get("name"))] = "failed" if failed else "passed"
    return found


def test_a_refused_magic_fails_the_notebook_unless_its_cell_expects_it(tmp_path):
    notebook(str(tmp_path / "refused.ipynb"),
             [("%load_ext tfmw_notebook", []), (REFUSED, []), ("print('after')", [])])
    notebook(str(tmp_path / "expected.ipynb"),
             [("%load_ext tfmw_notebook", []), (REFUSED, ["raises-usage-error"]),
              ("print('after')", [])])
    notebook(str(tmp_path / "stale_tag.ipynb"),
             [("%load_ext tfmw_notebook", []), ("print('accepted')", ["raises-usage-error"])])
    found = outcomes(tmp_path)
    by_notebook = {name: [found[key] for key in sorted(found) if key[0] == name]
                   for name in ("refused", "expected", "stale_tag")}
    assert by_notebook == {"refused": ["passed", "failed", "passed"],
                           "expected": ["passed", "passed", "passed"],
                           "stale_tag": ["passed", "failed"]}, found
