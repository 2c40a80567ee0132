"""Basic regression: Predict fuel efficiency (TensorFlow's Keras tutorial): the Auto MPG
table read with pandas, cleaned and one-hot encoded, `Normalization` layers adapted to
it, then four models fitted from DataFrames with `validation_split` under `%%time`
(linear in one feature, linear in all, a DNN on one feature, a DNN on all), each
evaluated, the last saved as `.keras` and reloaded. Code written for one process with no
strategy: on the workers it runs inside the cluster's strategy scope."""

from corpus.offline_data import AUTO_MPG, seeded

SOURCE = {
    "repository": "tensorflow/docs",
    "commit": "7c3650212740204359d4ceae481abc79345541be",
    "path": "site/en/tutorials/keras/regression.ipynb",
    "title": "Basic regression: Predict fuel efficiency",
}
# Keras-3 code (TensorFlow's current tutorial): under tf-keras `Normalization(axis=-1)`
# fails to adapt in one process too ("All `axis` values to be kept must have known
# shape").
KERAS = "3"
CHANGES = [
    "the UCI download -> a generated file in the same format (DATA: 398 rows, the same "
    "columns and ranges, 6 horsepowers '?', names after a tab): `url = '<UCI address>'` "
    "-> `url = auto_mpg_file`",
    "dropped: the licence cells, `!pip install -q seaborn` and `import seaborn as sns` "
    "(seaborn only draws the pair plot; it is not installed here), and the plotting "
    "cells (pair plot, `plot_loss`, `plot_horsepower` and their calls, the prediction "
    "scatter and error histogram)",
    "sizes: epochs 100 -> 4 in the four fits",
    "DATA seeds every generator (`corpus.offline_data.seeded(1)`): the program's shuffles "
    "and initial weights are unseeded; seeded, every worker starts and shuffles as one "
    "process does, so its loss can be compared tightly",
]
DATA = AUTO_MPG + seeded(1)
CELLS = [
    r'''import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

# Make NumPy printouts easier to read.
np.set_printoptions(precision=3, suppress=True)''',
    r'''import tensorflow as tf

from tensorflow import keras
from tensorflow.keras import layers

print(tf.__version__)''',
    r'''url = auto_mpg_file
column_names = ['MPG', 'Cylinders', 'Displacement', 'Horsepower', 'Weight',
                'Acceleration', 'Model Year', 'Origin']

raw_dataset = pd.read_csv(url, names=column_names,
                          na_values='?', comment='\t',
                          sep=' ', skipinitialspace=True)''',
    r'''dataset = raw_dataset.copy()
dataset.tail()''',
    r'''dataset.isna().sum()''',
    r'''dataset = dataset.dropna()''',
    r'''dataset['Origin'] = dataset['Origin'].map({1: 'USA', 2: 'Europe', 3: 'Japan'})''',
    r'''dataset = pd.get_dummies(dataset, columns=['Origin'], prefix='', prefix_sep='', dtype=float)
dataset.tail()''',
    r'''train_dataset = dataset.sample(frac=0.8, random_state=0)
test_dataset = dataset.drop(train_dataset.index)''',
    r'''train_dataset.describe().transpose()''',
    r'''train_features = train_dataset.copy()
test_features = test_dataset.copy()

train_labels = train_features.pop('MPG')
test_labels = test_features.pop('MPG')''',
    r'''train_dataset.describe().transpose()[['mean', 'std']]''',
    r'''normalizer = tf.keras.layers.Normalization(axis=-1)''',
    r'''normalizer.adapt(np.array(train_features))''',
    r'''print(normalizer.mean.numpy())''',
    r'''first = np.array(train_features[:1])

with np.printoptions(precision=2, suppress=True):
  print('First example:', first)
  print()
  print('Normalized:', normalizer(first).numpy())''',
    r'''horsepower = np.array(train_features['Horsepower'])

horsepower_normalizer = layers.Normalization(input_shape=[1,], axis=None)
horsepower_normalizer.adapt(horsepower)''',
    r'''horsepower_model = tf.keras.Sequential([
    horsepower_normalizer,
    layers.Dense(units=1)
])

horsepower_model.summary()''',
    r'''horsepower_model.predict(horsepower[:10])''',
    r'''horsepower_model.compile(
    optimizer=tf.keras.optimizers.Adam(learning_rate=0.1),
    loss='mean_absolute_error')''',
    r'''%%time
history = horsepower_model.fit(
    train_features['Horsepower'],
    train_labels,
    epochs=4,
    # Suppress logging.
    verbose=0,
    # Calculate validation results on 20% of the training data.
    validation_split = 0.2)''',
    r'''hist = pd.DataFrame(history.history)
hist['epoch'] = history.epoch
hist.tail()''',
    r'''test_results = {}

test_results['horsepower_model'] = horsepower_model.evaluate(
    test_features['Horsepower'],
    test_labels, verbose=0)''',
    r'''x = tf.linspace(0.0, 250, 251)
y = horsepower_model.predict(x)''',
    r'''linear_model = tf.keras.Sequential([
    normalizer,
    layers.Dense(units=1)
])''',
    r'''linear_model.predict(train_features[:10])''',
    r'''linear_model.layers[1].kernel''',
    r'''linear_model.compile(
    optimizer=tf.keras.optimizers.Adam(learning_rate=0.1),
    loss='mean_absolute_error')''',
    r'''%%time
history = linear_model.fit(
    train_features,
    train_labels,
    epochs=4,
    # Suppress logging.
    verbose=0,
    # Calculate validation results on 20% of the training data.
    validation_split = 0.2)''',
    r'''test_results['linear_model'] = linear_model.evaluate(
    test_features, test_labels, verbose=0)''',
    r'''def build_and_compile_model(norm):
  model = keras.Sequential([
      norm,
      layers.Dense(64, activation='relu'),
      layers.Dense(64, activation='relu'),
      layers.Dense(1)
  ])

  model.compile(loss='mean_absolute_error',
                optimizer=tf.keras.optimizers.Adam(0.001))
  return model''',
    r'''dnn_horsepower_model = build_and_compile_model(horsepower_normalizer)''',
    r'''dnn_horsepower_model.summary()''',
    r'''%%time
history = dnn_horsepower_model.fit(
    train_features['Horsepower'],
    train_labels,
    validation_split=0.2,
    verbose=0, epochs=4)''',
    r'''x = tf.linspace(0.0, 250, 251)
y = dnn_horsepower_model.predict(x)''',
    r'''test_results['dnn_horsepower_model'] = dnn_horsepower_model.evaluate(
    test_features['Horsepower'], test_labels,
    verbose=0)''',
    r'''dnn_model = build_and_compile_model(normalizer)
dnn_model.summary()''',
    r'''%%time
history = dnn_model.fit(
    train_features,
    train_labels,
    validation_split=0.2,
    verbose=0, epochs=4)''',
    r'''test_results['dnn_model'] = dnn_model.evaluate(test_features, test_labels, verbose=0)''',
    r'''pd.DataFrame(test_results, index=['Mean absolute error [MPG]']).T''',
    r'''dnn_model.save('dnn_model.keras')''',
    r'''reloaded = tf.keras.models.load_model('dnn_model.keras')

test_results['reloaded'] = reloaded.evaluate(
    test_features, test_labels, verbose=0)''',
    r'''pd.DataFrame(test_results, index=['Mean absolute error [MPG]']).T''',
]
MODEL = "[horsepower_model, linear_model, dnn_horsepower_model, dnn_model, reloaded]"
LOSS = "history.history['loss'][-1]"
# Seeded: the same start and global batches as one process; float summation order
# only (measured 2026-11-26, 4 epochs: 20.93375 vs 20.93344).
TOLERANCE = 0.01
# fit() from DataFrames: batch_size 32 is the global batch, the same in one process.
ONE_PROCESS: dict[str, str] = {}
EXPECT_ERROR = None
