"""Distributed training with Keras (TensorFlow's tutorial): a small CNN on MNIST compiled
and fitted inside a strategy's scope with four callbacks (TensorBoard, ModelCheckpoint of
`.weights.h5` every epoch, LearningRateScheduler, a custom one printing the learning
rate), the latest checkpoint loaded back with `load_weights` and evaluated, then the model
saved as `.keras` and loaded both outside and inside a strategy's scope and evaluated.
Exercises `%load_ext` and `!ls` on the workers, every worker writing checkpoints and
reading them back."""

from corpus.offline_data import TFDS_MNIST, seeded

SOURCE = {
    "repository": "tensorflow/docs",
    "commit": "7c3650212740204359d4ceae481abc79345541be",
    "path": "site/en/tutorials/distribute/keras.ipynb",
    "title": "Distributed training with Keras",
}
# Keras-3 code (TensorFlow's current tutorial): it checkpoints `.weights.h5` and loads
# them back with `load_weights`, which tf-keras cannot do under a multi-worker strategy
# (one process fails too: "unsupported operand type(s) for /: 'Dataset' and 'int'").
KERAS = "3"
CHANGES = [
    "`import tensorflow_datasets as tfds` dropped: DATA defines `tfds.load` for MNIST "
    "offline (scikit-learn's digits at 28x28x1 uint8 in [0, 255], int64 labels, "
    "1,500 train / 297 test, `info.splits[...].num_examples`)",
    "`tf.distribute.MirroredStrategy()` -> `tf.distribute.MultiWorkerMirroredStrategy()`: "
    "the one-machine strategy becomes the multi-worker one (on the workers it is the "
    "cluster's strategy)",
    "dropped: the licence cell and `%tensorboard --logdir=logs` (a display)",
    "sizes: EPOCHS 12 -> 2",
    "DATA seeds every generator (`corpus.offline_data.seeded(1)`): the program's shuffles "
    "and initial weights are unseeded; seeded, every worker starts and shuffles as one "
    "process does, so its loss can be compared tightly",
]
DATA = TFDS_MNIST + seeded(1)
CELLS = [
    r'''import tensorflow as tf

import os

# Load the TensorBoard notebook extension.
%load_ext tensorboard''',
    r'''print(tf.__version__)''',
    r'''datasets, info = tfds.load(name='mnist', with_info=True, as_supervised=True)

mnist_train, mnist_test = datasets['train'], datasets['test']''',
    r'''strategy = tf.distribute.MultiWorkerMirroredStrategy()''',
    r'''print('Number of devices: {}'.format(strategy.num_replicas_in_sync))''',
    r'''# You can also do info.splits.total_num_examples to get the total
# number of examples in the dataset.

num_train_examples = info.splits['train'].num_examples
num_test_examples = info.splits['test'].num_examples

BUFFER_SIZE = 10000

BATCH_SIZE_PER_REPLICA = 64
BATCH_SIZE = BATCH_SIZE_PER_REPLICA * strategy.num_replicas_in_sync''',
    r'''def scale(image, label):
  image = tf.cast(image, tf.float32)
  image /= 255

  return image, label''',
    r'''train_dataset = mnist_train.map(scale).cache().shuffle(BUFFER_SIZE).batch(BATCH_SIZE)
eval_dataset = mnist_test.map(scale).batch(BATCH_SIZE)''',
    r'''with strategy.scope():
  model = tf.keras.Sequential([
      tf.keras.layers.Conv2D(32, 3, activation='relu', input_shape=(28, 28, 1)),
      tf.keras.layers.MaxPooling2D(),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(64, activation='relu'),
      tf.keras.layers.Dense(10)
  ])

  model.compile(loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                optimizer=tf.keras.optimizers.Adam(learning_rate=0.001),
                metrics=['accuracy'])''',
    r'''# Define the checkpoint directory to store the checkpoints.
checkpoint_dir = './training_checkpoints'
# Define the name of the checkpoint files.
checkpoint_prefix = os.path.join(checkpoint_dir, "ckpt_{epoch:04d}.weights.h5")''',
    r'''# Define a function for decaying the learning rate.
# You can define any decay function you need.
def decay(epoch):
  if epoch < 3:
    return 1e-3
  elif epoch >= 3 and epoch < 7:
    return 1e-4
  else:
    return 1e-5''',
    r'''# Define a callback for printing the learning rate at the end of each epoch.
class PrintLR(tf.keras.callbacks.Callback):
  def on_epoch_end(self, epoch, logs=None):
    print('\nLearning rate for epoch {} is {}'.format(epoch + 1, model.optimizer.learning_rate.numpy()))''',
    r'''# Put all the callbacks together.
callbacks = [
    tf.keras.callbacks.TensorBoard(log_dir='./logs'),
    tf.keras.callbacks.ModelCheckpoint(filepath=checkpoint_prefix,
                                       save_weights_only=True),
    tf.keras.callbacks.LearningRateScheduler(decay),
    PrintLR()
]''',
    r'''EPOCHS = 2

model.fit(train_dataset, epochs=EPOCHS, callbacks=callbacks)''',
    r'''# Check the checkpoint directory.
!ls {checkpoint_dir}''',
    r'''import pathlib
latest_checkpoint = sorted(pathlib.Path(checkpoint_dir).glob('*'))[-1]

model.load_weights(latest_checkpoint)

eval_loss, eval_acc = model.evaluate(eval_dataset)

print('Eval loss: {}, Eval accuracy: {}'.format(eval_loss, eval_acc))''',
    r'''!ls -sh ./logs''',
    r"""path = 'my_model.keras'""",
    r'''model.save(path)''',
    r'''unreplicated_model = tf.keras.models.load_model(path)

unreplicated_model.compile(
    loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    optimizer=tf.keras.optimizers.Adam(),
    metrics=['accuracy'])

eval_loss, eval_acc = unreplicated_model.evaluate(eval_dataset)

print('Eval loss: {}, Eval Accuracy: {}'.format(eval_loss, eval_acc))''',
    r'''with strategy.scope():
  replicated_model = tf.keras.models.load_model(path)
  replicated_model.compile(loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                           optimizer=tf.keras.optimizers.Adam(),
                           metrics=['accuracy'])

  eval_loss, eval_acc = replicated_model.evaluate(eval_dataset)
  print ('Eval loss: {}, Eval Accuracy: {}'.format(eval_loss, eval_acc))''',
]
MODEL = "model"
# The fit's history is not kept (evaluate gives `model.history` a fresh History), so the
# last evaluation's loss (the trained weights, saved and loaded back) stands in.
LOSS = "eval_loss"
# Seeded: the same start and global batches as one process (measured 2026-11-26:
# 0.6356467 both ways).
TOLERANCE = 0.01
# The same global batch in one process: 64 per replica x 2 workers.
ONE_PROCESS = {
    "BATCH_SIZE = BATCH_SIZE_PER_REPLICA * strategy.num_replicas_in_sync":
        "BATCH_SIZE = BATCH_SIZE_PER_REPLICA * 2",
}
EXPECT_ERROR = None
