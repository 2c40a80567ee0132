"""A correction whose target is missing, on real workers: the cell's `import keras` works and
the notebook shows one line, from the chief, naming the skipped correction
(worker/common/guarded_patches.py; the pure parts: test_guarded_patches_unit.py).

The workers import a stand-in `keras` whose trainer class is renamed (what keras-nightly
3.16 did to the corrections; before, the cell raised AttributeError at `import keras`). The
real Keras is imported first and put back afterwards, so the shared cluster keeps it.
"""

import textwrap

import pytest

from test_guarded_patches_unit import STAND_IN

pytestmark = pytest.mark.timeout(300)

SWAP_IN = """\
import sys
import keras as _real_keras   # the real one first: the workers' own hooks are for it
from tfmw_notebook.worker.common import import_hooks as _hooks
from tfmw_notebook.worker.corrections import keras3_corrections as _kc
_saved = {{n: m for n, m in sys.modules.items() if n.split('.')[0] == 'keras'}}
_applied, _kc._applied = _kc._applied, None
for _name in _saved:
    del sys.modules[_name]
sys.path.insert(0, {path!r})
_hooks.when_imported('keras', lambda module: _kc.apply())
"""

SWAP_BACK = """\
for _name in [n for n in sys.modules if n.split('.')[0] == 'keras']:
    del sys.modules[_name]
sys.modules.update(_saved)
sys.path.remove({path!r})
_kc._applied = _applied
"""


def test_import_keras_works_and_one_line_names_the_skipped_correction(tf_kernel, tmp_path):
    for path, text in STAND_IN.items():
        if path.startswith("keras/"):
            (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / path).write_text(textwrap.dedent(text))
    path = str(tmp_path)
    tf_kernel.ok("%%tfdist\n" + SWAP_IN.format(path=path))
    try:
        out = tf_kernel.ok("%%tfdist\nimport warnings\nwith warnings.catch_warnings():\n"
                           "    warnings.simplefilter('ignore')   # Keras 3.99 is not verified\n"
                           "    import keras\nprint('imported keras', keras.__version__)")
    finally:
        tf_kernel.ok("%%tfdist\n" + SWAP_BACK.format(path=path))
    assert "imported keras 3.99.0" in out.stdout, out.stdout
    lines = [line for line in out.stderr.splitlines() if "skipped" in line]
    assert len(lines) == 1, out.stderr                      # the chief's, not one per worker
    assert lines[0].startswith("[worker 0] tfmw_notebook: on Keras 3.99.0, TensorFlow 2."), lines
    assert ("keras3_corrections.build_from_local_batch (keras.src.backend.tensorflow.trainer."
            "TensorFlowTrainer (Trainer from Keras 3.16)._maybe_symbolic_build: TargetChanged"
            in lines[0]), lines[0]
    again = tf_kernel.ok("%%tfdist\nimport keras\nprint(keras.__version__.split('.')[0])")
    assert "skipped" not in again.stderr                    # said once
    assert again.stdout.strip().endswith("3"), again.stdout  # the real Keras is back
