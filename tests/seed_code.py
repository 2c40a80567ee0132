"""The seed tutorials' code, as cells for %%tfdist (MNIST download replaced by
scikit-learn's bundled digits, scaled up to MNIST's 28x28)."""

MNIST_SETUP = '''
import os
import json
import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits

def load_digits_as_mnist():
    digits = load_digits()
    images = np.kron(digits.images, np.ones((3, 3)))          # 8x8 -> 24x24
    images = np.pad(images, ((0, 0), (2, 2), (2, 2))) * (255.0 / 16.0)
    return images.astype(np.uint8), digits.target.astype(np.uint8)

def mnist_dataset(batch_size):
  x_train, y_train = load_digits_as_mnist()
  # The `x` arrays are in uint8 and have values in the [0, 255] range.
  # You need to convert them to float32 with values in the [0, 1] range.
  x_train = x_train / np.float32(255)
  y_train = y_train.astype(np.int64)
  train_dataset = tf.data.Dataset.from_tensor_slices(
      (x_train, y_train)).shuffle(60000, seed=1).repeat().batch(batch_size)
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
      optimizer=tf.keras.optimizers.SGD(learning_rate=0.01),
      metrics=['accuracy'])
  return model
'''

MAIN = '''
per_worker_batch_size = 64
tf_config = json.loads(os.environ['TF_CONFIG'])
num_workers = len(tf_config['cluster']['worker'])

strategy = tf.distribute.MultiWorkerMirroredStrategy()

global_batch_size = per_worker_batch_size * num_workers
multi_worker_dataset = mnist_dataset(global_batch_size)

with strategy.scope():
  # Model building/compiling need to be within `strategy.scope()`.
  multi_worker_model = build_and_compile_cnn_model()

history = multi_worker_model.fit(multi_worker_dataset, epochs=3, steps_per_epoch=15)
losses = history.history['loss']
'''

CUSTOM_LOOP = '''
def dataset_fn(input_context):
  batch_size = input_context.get_per_replica_batch_size(global_batch_size)
  x, y = load_digits_as_mnist()
  ds = tf.data.Dataset.from_tensor_slices((x / np.float32(255), y.astype(np.int64)))
  ds = ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
  return ds.shuffle(2000, seed=1).repeat().batch(batch_size)

with strategy.scope():
  ctl_model = build_and_compile_cnn_model()
  ctl_optimizer = tf.keras.optimizers.SGD(learning_rate=0.05)

per_worker_iterator = iter(strategy.distribute_datasets_from_function(dataset_fn))

@tf.function
def train_step(iterator):
  def step_fn(inputs):
    x, y = inputs
    with tf.GradientTape() as tape:
      predictions = ctl_model(x, training=True)
      per_example_loss = tf.keras.losses.SparseCategoricalCrossentropy(
          from_logits=True, reduction=tf.keras.losses.Reduction.NONE)(y, predictions)
      loss = tf.nn.compute_average_loss(per_example_loss, global_batch_size=global_batch_size)
    grads = tape.gradient(loss, ctl_model.trainable_variables)
    ctl_optimizer.apply_gradients(zip(grads, ctl_model.trainable_variables))
    return loss
  per_replica_losses = strategy.run(step_fn, args=(next(iterator),))
  return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)

ctl_losses = []
for epoch in range(3):
  total = 0.0
  for step in range(10):
    total += float(train_step(per_worker_iterator))
  ctl_losses.append(total / 10)
'''
