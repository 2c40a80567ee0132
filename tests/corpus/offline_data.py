"""Offline stand-ins for the datasets the corpus programs download, as source text for
their DATA (it runs on the workers and in the one-process reference).

Every stand-in keeps the original's shapes, dtypes and value ranges: MNIST and
Fashion-MNIST become scikit-learn's bundled digits (1,797 8x8 images) scaled up to
28x28 uint8 in [0, 255], split 1,500 / 297 for train / test.
"""

DIGITS_AS_MNIST = r'''
import numpy as _np
from sklearn.datasets import load_digits as _load_digits

def load_digits_as_mnist():
    """((x_train, y_train), (x_test, y_test)) like keras.datasets.mnist.load_data():
    28x28 uint8 images in [0, 255], uint8 labels 0-9."""
    digits = _load_digits()
    images = _np.kron(digits.images, _np.ones((3, 3)))                    # 8x8 -> 24x24
    images = _np.pad(images, ((0, 0), (2, 2), (2, 2))) * (255.0 / 16.0)   # -> 28x28
    images, labels = images.astype(_np.uint8), digits.target.astype(_np.uint8)
    return (images[:1500], labels[:1500]), (images[1500:], labels[1500:])
'''

# keras.datasets.mnist.load_data() (and fashion_mnist's) answer offline; the cells call
# them unchanged, through tf.keras (tf-keras or Keras 3) and `import keras` (Keras 3).
PATCH_KERAS_DATASETS = DIGITS_AS_MNIST + r'''
import tensorflow as _tf

def _offline_load_data(path=None):
    return load_digits_as_mnist()

import keras as _keras

for _datasets in (_tf.keras.datasets, _keras.datasets):   # tf-keras and/or Keras 3
    _datasets.mnist.load_data = _offline_load_data
    _datasets.fashion_mnist.load_data = _offline_load_data
'''

# A `tfds` with the one call the programs make: tfds.load('mnist' or 'fashion_mnist',
# with_info=True, as_supervised=True) -> ({'train': ds, 'test': ds}, info), elements
# (uint8 image 28x28x1, int64 label) as TensorFlow Datasets gives them.
TFDS_MNIST = DIGITS_AS_MNIST + r'''
import types as _types
import tensorflow as _tf

def _tfds_load(name, with_info=False, as_supervised=False, **kwargs):
    assert name in ("mnist", "fashion_mnist"), name
    splits = dict(zip(("train", "test"), load_digits_as_mnist()))
    datasets = {}
    for split, (images, labels) in splits.items():
        images, labels = images[..., None], labels.astype(_np.int64)
        datasets[split] = _tf.data.Dataset.from_tensor_slices(
            (images, labels) if as_supervised else {"image": images, "label": labels})
    info = _types.SimpleNamespace(splits={
        split: _types.SimpleNamespace(num_examples=len(images))
        for split, (images, _) in splits.items()})
    return (datasets, info) if with_info else datasets

tfds = _types.SimpleNamespace(load=_tfds_load)
'''

# The UCI Auto MPG file (auto-mpg.data) as generated rows in its own format: 398 cars,
# whitespace-separated columns, 6 missing horsepowers written '?', the car's name after a
# tab; values in the original's ranges, MPG falling with weight and horsepower.
AUTO_MPG = r"""
import os as _os
import tempfile as _tempfile
import numpy as _np

def _write_auto_mpg(path):
    rng = _np.random.default_rng(0)
    rows = []
    for i in range(398):
        cylinders = int(rng.choice([4, 4, 4, 6, 8, 8, 3, 5]))
        displacement = float(_np.clip(cylinders * 40 + rng.normal(0, 25), 68, 455))
        horsepower = float(_np.clip(displacement * 0.45 + rng.normal(20, 12), 46, 230))
        weight = float(_np.clip(displacement * 8 + 1300 + rng.normal(0, 250), 1613, 5140))
        acceleration = float(_np.clip(24 - horsepower / 15 + rng.normal(0, 1.5), 8, 24.8))
        year = int(rng.integers(70, 83))
        origin = int(rng.choice([1, 1, 1, 2, 3]))
        mpg = float(_np.clip(40 - weight / 170 - horsepower / 40 + (year - 70) * 0.7
                             + rng.normal(0, 2.5), 9, 46.6))
        hp = "?" if i % 66 == 5 else f"{horsepower:.1f}"
        rows.append(f"{mpg:.1f}   {cylinders}   {displacement:.1f}      {hp}      "
                    f"{weight:.0f}.      {acceleration:.1f}   {year}  {origin}"
                    f'\t"car {i}"\n')
    with open(path, "w") as f:
        f.writelines(rows)

auto_mpg_file = _os.path.join(_tempfile.gettempdir(), "auto-mpg.data")
_write_auto_mpg(auto_mpg_file)
"""


def seeded(seed: int) -> str:
    """DATA text that seeds every generator a program may draw from unseeded (Python's,
    NumPy's, TensorFlow's, and Keras 3's own): run on every worker and in the reference,
    each worker then shuffles and starts the same way as one process, so the workers'
    global batches are the reference's and the loss check can be tight. Both Kerases'
    calls: tf-keras keeps a seed generator of its own besides TensorFlow's."""
    return rf"""
import tensorflow as _tf_for_seed
import keras as _keras_for_seed
_tf_for_seed.keras.utils.set_random_seed({seed})
_keras_for_seed.utils.set_random_seed({seed})
"""

# A `tfds` with the calls TensorFlow's "Custom training: walkthrough" makes for the Palmer
# penguins: tfds.load('penguins/simple', split='train', with_info=True) -> (dicts of the
# raw measurements, info) and tfds.load('penguins/processed', split=['train[:20%]',
# 'train[20%:]'], as_supervised=True, with_info=True) -> ([datasets of (float32 features
# (4,) in [0, 1], int64 species)], info); tfds.as_dataframe(ds, info) -> a pandas DataFrame.
# 334 penguins (TFDS's processed set: the 344 of the survey less 10 with missing values),
# 146 Adelie / 68 Chinstrap / 120 Gentoo as in the survey, each measurement drawn around
# its species' mean in the survey (culmen length and depth, flipper length, body mass),
# in a fixed shuffled order; the processed features are those four, min-max normalized.
PENGUINS_TFDS = r'''
import types as _types
import numpy as _np
import tensorflow as _tf

def _penguin_rows():
    rng = _np.random.default_rng(0)
    means = ((38.8, 18.3, 190.0, 3706.0), (48.8, 18.4, 195.8, 3733.0),
             (47.5, 15.0, 217.2, 5076.0))
    stds = ((2.7, 1.2, 6.5, 459.0), (3.3, 1.1, 7.1, 384.0), (3.1, 1.0, 6.5, 504.0))
    counts = (146, 68, 120)
    raw = _np.concatenate([rng.normal(m, s, size=(n, 4))
                           for m, s, n in zip(means, stds, counts)]).astype(_np.float32)
    species = _np.repeat(_np.arange(3, dtype=_np.int64), counts)
    island = _np.concatenate([rng.integers(0, 3, 146), _np.ones(68), _np.zeros(120)])
    sex = rng.integers(0, 2, sum(counts))
    order = rng.permutation(sum(counts))
    return raw[order], species[order], island[order].astype(_np.int64), sex[order]

class _Features(dict):
    def __repr__(self):
        return "FeaturesDict({\n" + "".join(f"    '{k}': {v},\n" for k, v in self.items()) + "})"

_PENGUIN_FEATURES = {
    "penguins/simple": _Features(
        body_mass_g="float32", culmen_depth_mm="float32", culmen_length_mm="float32",
        flipper_length_mm="float32", island="ClassLabel(shape=(), dtype=int64, num_classes=3)",
        sex="ClassLabel(shape=(), dtype=int64, num_classes=3)",
        species="ClassLabel(shape=(), dtype=int64, num_classes=3)"),
    "penguins/processed": _Features(
        features="Tensor(shape=(4,), dtype=float32)",
        species="ClassLabel(shape=(), dtype=int64, num_classes=3)"),
}

def _penguin_split(split, n):
    # 'train', 'train[:20%]', 'train[20%:]' (TFDS rounds a percent boundary to the nearest)
    if split == "train":
        return slice(0, n)
    start, stop = split[len("train["):-1].split(":")
    bound = lambda text, default: default if not text else round(n * int(text[:-1]) / 100)
    return slice(bound(start, 0), bound(stop, n))

def _tfds_load(name, split=None, with_info=False, as_supervised=False, **kwargs):
    assert name in _PENGUIN_FEATURES, name
    raw, species, island, sex = _penguin_rows()
    if name == "penguins/simple":
        columns = {"body_mass_g": raw[:, 3], "culmen_depth_mm": raw[:, 1],
                   "culmen_length_mm": raw[:, 0], "flipper_length_mm": raw[:, 2],
                   "island": island, "sex": sex, "species": species}
        make = lambda s: _tf.data.Dataset.from_tensor_slices(
            {k: v[s] for k, v in columns.items()})
    else:
        features = (raw - raw.min(axis=0)) / (raw.max(axis=0) - raw.min(axis=0))
        make = lambda s: _tf.data.Dataset.from_tensor_slices(
            (features[s], species[s]) if as_supervised
            else {"features": features[s], "species": species[s]})
    splits = split if isinstance(split, (list, tuple)) else [split or "train"]
    datasets = [make(_penguin_split(s, len(species))) for s in splits]
    datasets = datasets if isinstance(split, (list, tuple)) else datasets[0]
    info = _types.SimpleNamespace(name=name, features=_PENGUIN_FEATURES[name])
    return (datasets, info) if with_info else datasets

def _tfds_as_dataframe(ds, ds_info=None):
    import pandas as _pd
    rows = []
    for element in ds.as_numpy_iterator():
        if isinstance(element, tuple):   # as_supervised: (features, species)
            element = dict(zip(("features", "species"), element))
        rows.append(element)
    return _pd.DataFrame(rows)

tfds = _types.SimpleNamespace(load=_tfds_load, as_dataframe=_tfds_as_dataframe,
                              __version__="offline stand-in (tests/corpus/offline_data.py)")
'''
