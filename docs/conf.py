"""Sphinx configuration of the documentation site.

Build: `sphinx-build -W -n --keep-going -b html docs docs/_build/html` (warnings are errors,
every cross-reference must resolve). The tutorials are the notebooks in notebooks/ (linked
here as tutorials/), rendered with their stored outputs, never executed. The magics'
reference is written from the argument parsers at each build (_ext/tfdist_reference.py).
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# This checkout's package, whatever else the environment has installed.
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(HERE, "_ext"))

project = "tfmw_notebook"
author = "the tfmw_notebook developers"
copyright = "2026, the tfmw_notebook developers"

extensions = ["myst_nb", "sphinx.ext.autodoc", "tfdist_reference"]
exclude_patterns = ["_build", "**/.ipynb_checkpoints", "Thumbs.db", ".DS_Store"]

# Tutorials: their stored outputs, as the tests left them.
nb_execution_mode = "off"
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence", "deflist"]

nitpicky = True
# Types from other projects in the API's signatures: no inventories here (built offline).
nitpick_ignore_regex = [
    ("py:class", r"(ipyparallel|numpy|IPython|collections\.abc|typing|pathlib|os)\..*"),
    ("py:class", r"(Callable|Any|Literal|Iterator|Iterable|Sequence|Mapping)"),
    # The package's internals that appear in public signatures; not part of the API.
    ("py:class", r"(tfmw_notebook\.[\w.]+\.)?(WorkerAccess|EngineGroup|GpusPerWorker|Addressing"
                 r"|CellSource|FitState|Sweeps|SweepTarget|RunHistory|Restarts|RestoreReport"
                 r"|CellRunning)"),
]

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "show-inheritance": True}

html_theme = "pydata_sphinx_theme"
html_title = "tfmw_notebook"
html_static_path = ["_static"]
html_theme_options = {"navigation_depth": 2, "show_toc_level": 2}
