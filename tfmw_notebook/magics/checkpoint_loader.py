"""Load a saved checkpoint into the notebook's own process (the picker's Load button).

The one notebook-side module that imports TensorFlow, and only when called.
"""

from __future__ import annotations

import json
import os
import sys

from ..protocol import checkpoints


def load_into_notebook(path: str):
    """Rebuild the saved model in this process (for predictions or inspection)."""
    if "tensorflow" not in sys.modules:
        # The first TF import here: keep its C++ start-up chatter out of the cell.
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        import tf_keras
    except ImportError:
        raise ValueError("loading here needs tf-keras in the notebook's Python: "
                         "pip install tf-keras") from None
    import tensorflow as tf

    spec = os.path.join(path, checkpoints.MODEL_JSON)
    if not os.path.exists(spec):
        raise ValueError(f"{os.path.basename(path)} holds weights only (the model has no JSON "
                         "form, e.g. a subclassed model): build the model here and restore with "
                         "tf.train.Checkpoint(model=model).read(...)")
    with open(spec) as source:
        model = tf_keras.models.model_from_json(source.read())
    weights = os.path.join(path, checkpoints.WEIGHTS)
    tf.train.Checkpoint(**checkpoints.trackables(model)).read(weights).expect_partial()
    with open(os.path.join(path, checkpoints.META_FILE)) as meta:
        model._tfmw_checkpoint = json.load(meta)
    return model
