"""Multi-worker training with Keras (TensorFlow's tutorial, the project's seed): the MNIST
CNN trained with MultiWorkerMirroredStrategy from `main.py`'s code, then the tutorial's
fault-tolerance sections: auto-shard options, `model.save` through `write_filepath`
(the chief writes the real path, the others a temp dir they delete) and `load_model`,
a CheckpointManager written the same way and restored with `latest_checkpoint`, and
three BackupAndRestore fits. Exercises `%%writefile`, `%%bash`, a module imported from
the working directory, and a cell that builds its own strategy."""

from corpus.offline_data import PATCH_KERAS_DATASETS, seeded

SOURCE = {
    "repository": "tensorflow/docs",
    "commit": "7c3650212740204359d4ceae481abc79345541be",
    "path": "site/en/tutorials/distribute/multi_worker_with_keras.ipynb",
    "title": "Multi-worker training with Keras",
}
KERAS = "default"
CHANGES = [
    "tf.keras.datasets.mnist.load_data() answers offline (DATA): scikit-learn's digits "
    "at MNIST's 28x28 uint8 in [0, 255], 1,500 training images",
    "dropped: the licence cell, `!pip install tf-nightly`, the cells that set or pop "
    "TF_CONFIG and launch `main.py` by hand (`%killbgscripts`, `%%bash --bg python main.py`, "
    "`time.sleep(10)`, `cat job_0.log`, the second worker's `python main.py`)",
    "`%%writefile main.py` line dropped: the workers run main.py's code as the cell",
    "sizes: every fit runs fewer epochs and steps (single worker 1 x 10, main 2 x 10, "
    "load_model and checkpoint restore 1 x 10, BackupAndRestore 2 x 10 with save_freq=5 "
    "instead of 30)",
    "DATA seeds every generator (`corpus.offline_data.seeded(1)`): the program's shuffles "
    "and initial weights are unseeded; seeded, every worker starts and shuffles as one "
    "process does, so its loss can be compared tightly",
]
DATA = PATCH_KERAS_DATASETS + seeded(1)
CELLS = [
    r'''import json
import os
import sys''',
    r'''os.environ["CUDA_VISIBLE_DEVICES"] = "-1"''',
    r'''if '.' not in sys.path:
  sys.path.insert(0, '.')''',
    r'''import tensorflow as tf''',
    r'''%%writefile mnist_setup.py

import os
import tensorflow as tf
import numpy as np

def mnist_dataset(batch_size):
  (x_train, y_train), _ = tf.keras.datasets.mnist.load_data()
  # The `x` arrays are in uint8 and have values in the [0, 255] range.
  # You need to convert them to float32 with values in the [0, 1] range.
  x_train = x_train / np.float32(255)
  y_train = y_train.astype(np.int64)
  train_dataset = tf.data.Dataset.from_tensor_slices(
      (x_train, y_train)).shuffle(60000).repeat().batch(batch_size)
  return train_dataset

def build_and_compile_cnn_model():
  model = tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=(28, 28)),
      tf.keras.layers.Reshape(target_shape=(28, 28, 1)),
      tf.keras.layers.Conv2D(32, 3, activation='relu'),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(128, activation='relu'),
      tf.keras.layers.Dense(10)
  ])
  model.compile(
      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      optimizer=tf.keras.optimizers.SGD(learning_rate=0.001),
      metrics=['accuracy'])
  return model''',
    r'''import mnist_setup

batch_size = 64
single_worker_dataset = mnist_setup.mnist_dataset(batch_size)
single_worker_model = mnist_setup.build_and_compile_cnn_model()
single_worker_model.fit(single_worker_dataset, epochs=1, steps_per_epoch=10)''',
    r'''tf_config = {
    'cluster': {
        'worker': ['localhost:12345', 'localhost:23456']
    },
    'task': {'type': 'worker', 'index': 0}
}''',
    r'''json.dumps(tf_config)''',
    r"""os.environ['GREETINGS'] = 'Hello TensorFlow!'""",
    r'''%%bash
echo ${GREETINGS}''',
    r'''strategy = tf.distribute.MultiWorkerMirroredStrategy()''',
    r'''with strategy.scope():
  # Model building/compiling need to be within `strategy.scope()`.
  multi_worker_model = mnist_setup.build_and_compile_cnn_model()''',
    r'''
import os
import json

import tensorflow as tf
import mnist_setup

per_worker_batch_size = 64
tf_config = json.loads(os.environ['TF_CONFIG'])
num_workers = len(tf_config['cluster']['worker'])

strategy = tf.distribute.MultiWorkerMirroredStrategy()

global_batch_size = per_worker_batch_size * num_workers
multi_worker_dataset = mnist_setup.mnist_dataset(global_batch_size)

with strategy.scope():
  # Model building/compiling need to be within `strategy.scope()`.
  multi_worker_model = mnist_setup.build_and_compile_cnn_model()


multi_worker_model.fit(multi_worker_dataset, epochs=2, steps_per_epoch=10)''',
    r'''%%bash
ls *.py''',
    r'''options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF

global_batch_size = 64
multi_worker_dataset = mnist_setup.mnist_dataset(batch_size=64)
dataset_no_auto_shard = multi_worker_dataset.with_options(options)''',
    r'''model_path = '/tmp/keras-model'

def _is_chief(task_type, task_id):
  # Note: there are two possible `TF_CONFIG` configurations.
  #   1) In addition to `worker` tasks, a `chief` task type is use;
  #      in this case, this function should be modified to
  #      `return task_type == 'chief'`.
  #   2) Only `worker` task type is used; in this case, worker 0 is
  #      regarded as the chief. The implementation demonstrated here
  #      is for this case.
  # For the purpose of this Colab section, the `task_type` is `None` case
  # is added because it is effectively run with only a single worker.
  return (task_type == 'worker' and task_id == 0) or task_type is None

def _get_temp_dir(dirpath, task_id):
  base_dirpath = 'workertemp_' + str(task_id)
  temp_dir = os.path.join(dirpath, base_dirpath)
  tf.io.gfile.makedirs(temp_dir)
  return temp_dir

def write_filepath(filepath, task_type, task_id):
  dirpath = os.path.dirname(filepath)
  base = os.path.basename(filepath)
  if not _is_chief(task_type, task_id):
    dirpath = _get_temp_dir(dirpath, task_id)
  return os.path.join(dirpath, base)

task_type, task_id = (strategy.cluster_resolver.task_type,
                      strategy.cluster_resolver.task_id)
write_model_path = write_filepath(model_path, task_type, task_id)''',
    r'''multi_worker_model.save(write_model_path)''',
    r'''if not _is_chief(task_type, task_id):
  tf.io.gfile.rmtree(os.path.dirname(write_model_path))''',
    r'''loaded_model = tf.keras.models.load_model(model_path)

# Now that the model is restored, and can continue with the training.
loaded_model.fit(single_worker_dataset, epochs=1, steps_per_epoch=10)''',
    r'''checkpoint_dir = '/tmp/ckpt'

checkpoint = tf.train.Checkpoint(model=multi_worker_model)
write_checkpoint_dir = write_filepath(checkpoint_dir, task_type, task_id)
checkpoint_manager = tf.train.CheckpointManager(
    checkpoint, directory=write_checkpoint_dir, max_to_keep=1)''',
    r'''checkpoint_manager.save()
if not _is_chief(task_type, task_id):
  tf.io.gfile.rmtree(write_checkpoint_dir)''',
    r'''latest_checkpoint = tf.train.latest_checkpoint(checkpoint_dir)
checkpoint.restore(latest_checkpoint)
multi_worker_model.fit(multi_worker_dataset, epochs=1, steps_per_epoch=10)''',
    r'''# Multi-worker training with `MultiWorkerMirroredStrategy`
# and the `BackupAndRestore` callback. The training state 
# is backed up at epoch boundaries by default.

callbacks = [tf.keras.callbacks.BackupAndRestore(backup_dir='/tmp/backup')]
with strategy.scope():
  multi_worker_model = mnist_setup.build_and_compile_cnn_model()
multi_worker_model.fit(multi_worker_dataset,
                       epochs=2,
                       steps_per_epoch=10,
                       callbacks=callbacks)''',
    r'''# The training state is backed up at epoch boundaries because `save_freq` is
# set to `epoch`.

callbacks = [tf.keras.callbacks.BackupAndRestore(backup_dir='/tmp/backup')]
with strategy.scope():
  multi_worker_model = mnist_setup.build_and_compile_cnn_model()
multi_worker_model.fit(multi_worker_dataset,
                       epochs=2,
                       steps_per_epoch=10,
                       callbacks=callbacks)
''',
    r'''# The training state is backed up at every 30 steps because `save_freq` is set
# to an integer value of `30`.

callbacks = [tf.keras.callbacks.BackupAndRestore(backup_dir='/tmp/backup', save_freq=5)]
with strategy.scope():
  multi_worker_model = mnist_setup.build_and_compile_cnn_model()
multi_worker_model.fit(multi_worker_dataset,
                       epochs=2,
                       steps_per_epoch=10,
                       callbacks=callbacks)''',
]
MODEL = "multi_worker_model"
LOSS = "multi_worker_model.history.history['loss'][-1]"
# Seeded: the same start and global batches as one process; float summation order
# only (measured 2026-11-26: 2.2716 vs 2.2758).
TOLERANCE = 0.01
ONE_PROCESS = {
    "tf_config = json.loads(os.environ['TF_CONFIG'])\n"
    "num_workers = len(tf_config['cluster']['worker'])": "num_workers = 2",
}
EXPECT_ERROR = None
