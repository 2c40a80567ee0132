"""Cell code shared by the Keras 3 tests: the weights' digests on every worker, and a body
run with one of the workers' Keras 3 corrections taken off (to show it is needed)."""

import json
import textwrap

DIGESTS = """\
import hashlib, json
from tfmw_notebook import active_cluster
_c = active_cluster()
print(json.dumps([hashlib.sha256(b"".join(w.tobytes() for w in
      _c.pull(["_weights"], rank=r)["_weights"])).hexdigest() for r in range(_c.size)]))
"""

KEEP_WEIGHTS = "_weights = [w for w in model.get_weights()]\n"

_WITHOUT = """\
import keras
from keras.src.backend.tensorflow import trainer as _trainer
from tfmw_notebook.worker.corrections import keras3_corrections as _kc
_owner = {owner}
_corrected = getattr(_owner, {name!r})
assert {correction!r} in _kc.corrections_on(_corrected), _kc.corrections_on(_corrected)
_keras_own = _corrected
while _kc.corrections_on(_keras_own):
    _keras_own = _keras_own.__wrapped__
setattr(_owner, {name!r}, _keras_own)   # as Keras 3 ships it, then every other correction
for _other, _correct in _kc.CORRECTIONS.items():
    if _other != {correction!r}:
        _correct()
try:
{body}
finally:
    setattr(_owner, {name!r}, _corrected)
"""


def digests(kernel) -> list[str]:
    """The sha256 of `_weights` on each worker, rank order."""
    return json.loads(kernel.ok(DIGESTS).stdout.strip().splitlines()[-1])


def without_correction(owner: str, name: str, correction: str, body: str) -> str:
    """Cell code running `body` with `owner.name` (an expression over `_trainer`, Keras'
    TensorFlow trainer module) wrapped by every correction but `correction`; the corrected
    one is put back afterwards."""
    return _WITHOUT.format(owner=owner, name=name, correction=correction,
                           body=textwrap.indent(body, "    "))
