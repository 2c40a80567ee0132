"""Save and load a model using a distribution strategy (TensorFlow's tutorial): a CNN on
MNIST built and fitted in a strategy's scope, saved as `.keras` and loaded back (fitted
again, also under a OneDeviceStrategy), saved with `tf.saved_model.save` and loaded with
`tf.saved_model.load` (its serving signature called directly and through `strategy.run`),
Keras `model.save(dir)` (a SavedModel, Keras 2) with and without
`experimental_io_device`, and a subclassed model saved before and after it has a
`save_spec()`. Every worker saves to the same `/tmp` paths and loads them back."""

from corpus.offline_data import TFDS_MNIST, seeded

SOURCE = {
    "repository": "tensorflow/docs",
    "commit": "7c3650212740204359d4ceae481abc79345541be",
    "path": "site/en/tutorials/distribute/save_and_load.ipynb",
    "title": "Save and load a model using a distribution strategy",
}
KERAS = "default"
CHANGES = [
    "`import tensorflow_datasets as tfds` dropped: DATA defines `tfds.load` for MNIST "
    "offline (scikit-learn's digits at 28x28x1 uint8 in [0, 255], int64 labels, "
    "1,500 train / 297 test)",
    "`tf.distribute.MirroredStrategy()` -> `tf.distribute.MultiWorkerMirroredStrategy()` "
    "(3 places, a 4th in the dropped cell): the one-machine strategy becomes the multi-worker one (on the workers "
    "it is the cluster's strategy)",
    "dropped: the licence cell and the cell that wraps the SavedModel in "
    "`tensorflow_hub.KerasLayer` (tensorflow_hub is not installed here)",
    "dropped: the cell of 'Saving or Loading from a local device' (its SaveOptions and "
    "LoadOptions with experimental_io_device='/job:localhost', for a Cloud TPU): on worker 1 "
    "of the cluster the device /job:localhost/replica:0/task:1/device:CPU:0 does not exist "
    "(measured through the magics; not tried in plain processes)",
    "DATA seeds every generator (`corpus.offline_data.seeded(1)`): the program's shuffles "
    "and initial weights are unseeded; seeded, every worker starts and shuffles as one "
    "process does, so its loss can be compared tightly",
]
DATA = TFDS_MNIST + seeded(1)
CELLS = [
    r'''import tensorflow as tf
''',
    r'''mirrored_strategy = tf.distribute.MultiWorkerMirroredStrategy()

def get_data():
  datasets = tfds.load(name='mnist', as_supervised=True)
  mnist_train, mnist_test = datasets['train'], datasets['test']

  BUFFER_SIZE = 10000

  BATCH_SIZE_PER_REPLICA = 64
  BATCH_SIZE = BATCH_SIZE_PER_REPLICA * mirrored_strategy.num_replicas_in_sync

  def scale(image, label):
    image = tf.cast(image, tf.float32)
    image /= 255

    return image, label

  train_dataset = mnist_train.map(scale).cache().shuffle(BUFFER_SIZE).batch(BATCH_SIZE)
  eval_dataset = mnist_test.map(scale).batch(BATCH_SIZE)

  return train_dataset, eval_dataset

def get_model():
  with mirrored_strategy.scope():
    model = tf.keras.Sequential([
        tf.keras.layers.Conv2D(32, 3, activation='relu', input_shape=(28, 28, 1)),
        tf.keras.layers.MaxPooling2D(),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(64, activation='relu'),
        tf.keras.layers.Dense(10)
    ])

    model.compile(loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  optimizer=tf.keras.optimizers.Adam(),
                  metrics=[tf.metrics.SparseCategoricalAccuracy()])
    return model''',
    r'''model = get_model()
train_dataset, eval_dataset = get_data()
model.fit(train_dataset, epochs=2)''',
    r'''keras_model_path = '/tmp/keras_save.keras'
model.save(keras_model_path)''',
    r'''restored_keras_model = tf.keras.models.load_model(keras_model_path)
restored_keras_model.fit(train_dataset, epochs=2)''',
    r'''another_strategy = tf.distribute.OneDeviceStrategy('/cpu:0')
with another_strategy.scope():
  restored_keras_model_ds = tf.keras.models.load_model(keras_model_path)
  restored_keras_model_ds.fit(train_dataset, epochs=2)''',
    r'''model = get_model()  # get a fresh model
saved_model_path = '/tmp/tf_save'
tf.saved_model.save(model, saved_model_path)''',
    r'''DEFAULT_FUNCTION_KEY = 'serving_default'
loaded = tf.saved_model.load(saved_model_path)
inference_func = loaded.signatures[DEFAULT_FUNCTION_KEY]''',
    r'''predict_dataset = eval_dataset.map(lambda image, label: image)
for batch in predict_dataset.take(1):
  print(inference_func(batch))''',
    r'''another_strategy = tf.distribute.MultiWorkerMirroredStrategy()
with another_strategy.scope():
  loaded = tf.saved_model.load(saved_model_path)
  inference_func = loaded.signatures[DEFAULT_FUNCTION_KEY]

  dist_predict_dataset = another_strategy.experimental_distribute_dataset(
      predict_dataset)

  # Calling the function in a distributed manner
  for batch in dist_predict_dataset:
    result = another_strategy.run(inference_func, args=(batch,))
    print(result)
    break''',
    r'''model = get_model()

# Saving the model using Keras `Model.save`
model.save(saved_model_path)

another_strategy = tf.distribute.MultiWorkerMirroredStrategy()
# Loading the model using the lower-level API
with another_strategy.scope():
  loaded = tf.saved_model.load(saved_model_path)''',
    r'''class SubclassedModel(tf.keras.Model):
  """Example model defined by subclassing `tf.keras.Model`."""

  output_name = 'output_layer'

  def __init__(self):
    super(SubclassedModel, self).__init__()
    self._dense_layer = tf.keras.layers.Dense(
        5, dtype=tf.dtypes.float32, name=self.output_name)

  def call(self, inputs):
    return self._dense_layer(inputs)

my_model = SubclassedModel()
try:
  my_model.save(saved_model_path)
except ValueError as e:
  print(f'{type(e).__name__}: ', *e.args)''',
    r'''tf.saved_model.save(my_model, saved_model_path)
x = tf.saved_model.load(saved_model_path)
x.signatures''',
    r'''print(my_model.save_spec() is None)''',
    r'''BATCH_SIZE_PER_REPLICA = 4
BATCH_SIZE = BATCH_SIZE_PER_REPLICA * mirrored_strategy.num_replicas_in_sync

dataset_size = 100
dataset = tf.data.Dataset.from_tensors(
    (tf.range(5, dtype=tf.float32), tf.range(5, dtype=tf.float32))
    ).repeat(dataset_size).batch(BATCH_SIZE)

my_model.compile(optimizer='adam', loss='mean_squared_error')
my_model.fit(dataset, epochs=2)

print(my_model.save_spec() is None)
my_model.save(saved_model_path)''',
]
# The models trained under the cluster's strategy. Not `restored_keras_model_ds`: the
# tutorial loads and fits it under `OneDeviceStrategy('/cpu:0')`, which trains on each worker
# alone (as in one process), so its weights are each worker's own (measured: they differ).
MODEL = "[restored_keras_model, my_model]"
LOSS = "restored_keras_model.history.history['loss'][-1]"
# Seeded: the same start and global batches as one process (measured 2026-11-26:
# 0.18244645 vs 0.18244646).
TOLERANCE = 0.01
# The same global batches in one process: per replica x 2 workers (both places).
ONE_PROCESS = {
    "BATCH_SIZE_PER_REPLICA * mirrored_strategy.num_replicas_in_sync":
        "BATCH_SIZE_PER_REPLICA * 2",
}
EXPECT_ERROR = None
