"""Load a saved checkpoint into the notebook's own process (the picker's Load button).

The one notebook-side module that imports TensorFlow, and only when called.
"""

from __future__ import annotations

import json
import os
import sys

from ..protocol import checkpoints, startup_log


def load_into_notebook(path: str):
    """Rebuild the saved model in this process (for predictions or inspection), with the
    Keras it was trained with: Keras 3 (`keras`) or tf-keras, as its meta.json records."""
    if "tensorflow" not in sys.modules:
        # The first TF import here: keep its C++ start-up chatter out of the cell.
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    with open(os.path.join(path, checkpoints.META_FILE)) as source:
        meta = json.load(source)
    spec = os.path.join(path, checkpoints.MODEL_JSON)
    if not os.path.exists(spec):
        raise ValueError(f"{os.path.basename(path)} holds weights only (the model has no JSON "
                         "form, e.g. a subclassed model): build the model here and restore with "
                         "tf.train.Checkpoint(model=model).read(...)")
    # TF's C++ start-up lines (protocol/startup_log.py) end once it has its devices.
    with startup_log.quiet_startup():
        from_json = _model_from_json(meta.get("keras", 2))
        import tensorflow as tf

        with open(spec) as source:
            model = from_json(source.read())
        weights = os.path.join(path, checkpoints.WEIGHTS)
        tf.train.Checkpoint(**checkpoints.trackables(model)).read(weights).expect_partial()
    model._tfmw_checkpoint = meta
    return model


def _model_from_json(keras: int):
    """`model_from_json` of the Keras the checkpoint was saved with."""
    if keras == 3:
        try:
            from keras.models import model_from_json
        except ImportError:
            raise ValueError("this checkpoint was saved with Keras 3: loading it here needs "
                             "Keras 3 in the notebook's Python: pip install 'keras>=3'") from None
        return model_from_json
    try:
        import tf_keras
    except ImportError:
        raise ValueError("this checkpoint was saved with tf-keras: loading it here needs "
                         "tf-keras in the notebook's Python: pip install tf-keras") from None
    return tf_keras.models.model_from_json
