"""A worker's own files: code that already gives each worker a directory of its own, and code
that reads back on every worker what the chief saved.

Two TensorFlow tutorials, run unchanged on two workers (the data is scikit-learn's digits at
MNIST's size: MNIST is a download):

- "Custom training loop with MultiWorkerMirroredStrategy" (multi_worker_with_ctl.ipynb):
  `write_filepath` gives a non-chief `<dir>/workertemp_<id>/ckpt`, made with
  `tf.io.gfile.makedirs`; a CheckpointManager saves there and the worker removes it with
  `tf.io.gfile.rmtree`. Its `checkpoint_dir` is `multiprocessing.util.get_temp_dir()`, a
  directory of each process's own, where the restore at the start of a later job would not
  find the chief's checkpoint: here it is one directory both workers see. On Keras 3, two
  tf-keras names it uses do not exist (`losses.Reduction.NONE`, `Metric.reset_states`): the
  Keras 3 spellings replace them, nothing else.
- "Distributed training with Keras" (keras.ipynb), its MirroredStrategy the cluster's
  multi-worker one, on tf-keras: fit with ModelCheckpoint(`ckpt_{epoch:04d}.weights.h5`,
  weights only), then every worker loads the newest file of the directory and evaluates;
  then `model.save("my_model.keras")` and `load_model` outside and inside the scope (4
  epochs, not 12). The same read-back also runs on two plain processes (no heartbeat).
"""

import json
import os
import subprocess
import sys

import pytest

from kernel_session import kernel_with_cluster
from two_process_harness import run_pair

pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module", params=["--keras 2", "--keras 3"])
def kernel(request, tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("worker-files"))
    with kernel_with_cluster(directory, flags=request.param) as session:
        session.cwd = directory
        session.flags = request.param
        session.ok("%%tfdist\n" + DIGITS_AS_MNIST)
        yield session


DIGITS_AS_MNIST = """\
import numpy as np
from sklearn.datasets import load_digits

def load_data():
    digits = load_digits()
    images = np.kron(digits.images, np.ones((3, 3)))                 # 8x8 -> 24x24
    images = np.pad(images, ((0, 0), (2, 2), (2, 2))) * (255.0 / 16.0)  # -> 28x28, 0..255
    images, labels = images.astype(np.uint8), digits.target.astype(np.uint8)
    return (images[:1500], labels[:1500]), (images[1500:], labels[1500:])
"""

CTL_TUTORIAL_MODULE = """\
import os
import json
import tensorflow as tf

def mnist_dataset(batch_size):
  (x_train, y_train), _ = load_data()
  x_train = x_train / np.float32(255)
  y_train = y_train.astype(np.int64)
  train_dataset = tf.data.Dataset.from_tensor_slices(
      (x_train, y_train)).shuffle(60000)
  return train_dataset

def dataset_fn(global_batch_size, input_context):
  batch_size = input_context.get_per_replica_batch_size(global_batch_size)
  dataset = mnist_dataset(batch_size)
  dataset = dataset.shard(input_context.num_input_pipelines,
                          input_context.input_pipeline_id)
  dataset = dataset.batch(batch_size)
  return dataset

def build_cnn_model():
  regularizer = tf.keras.regularizers.L2(1e-5)
  return tf.keras.Sequential([
      tf.keras.Input(shape=(28, 28)),
      tf.keras.layers.Reshape(target_shape=(28, 28, 1)),
      tf.keras.layers.Conv2D(32, 3,
                             activation='relu',
                             kernel_regularizer=regularizer),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(128,
                            activation='relu',
                            kernel_regularizer=regularizer),
      tf.keras.layers.Dense(10, kernel_regularizer=regularizer)
  ])
"""

CTL_TUTORIAL_MAIN = """\
per_worker_batch_size = 64
tf_config = json.loads(os.environ['TF_CONFIG'])
num_workers = len(tf_config['cluster']['worker'])
global_batch_size = per_worker_batch_size * num_workers

num_epochs = 3
num_steps_per_epoch=5

def _is_chief(task_type, task_id, cluster_spec):
  return (task_type is None
          or task_type == 'chief'
          or (task_type == 'worker'
              and task_id == 0
              and 'chief' not in cluster_spec.as_dict()))

def _get_temp_dir(dirpath, task_id):
  base_dirpath = 'workertemp_' + str(task_id)
  temp_dir = os.path.join(dirpath, base_dirpath)
  tf.io.gfile.makedirs(temp_dir)
  return temp_dir

def write_filepath(filepath, task_type, task_id, cluster_spec):
  dirpath = os.path.dirname(filepath)
  base = os.path.basename(filepath)
  if not _is_chief(task_type, task_id, cluster_spec):
    dirpath = _get_temp_dir(dirpath, task_id)
  return os.path.join(dirpath, base)

checkpoint_dir = os.path.join(SHARED_DIR, 'ckpt')

strategy = tf.distribute.MultiWorkerMirroredStrategy()

with strategy.scope():
  multi_worker_model = build_cnn_model()

  multi_worker_dataset = strategy.distribute_datasets_from_function(
      lambda input_context: dataset_fn(global_batch_size, input_context))
  optimizer = tf.keras.optimizers.RMSprop(learning_rate=0.001)
  train_accuracy = tf.keras.metrics.SparseCategoricalAccuracy(
      name='train_accuracy')

@tf.function
def train_step(iterator):
  def step_fn(inputs):
    x, y = inputs
    with tf.GradientTape() as tape:
      predictions = multi_worker_model(x, training=True)
      per_example_loss = tf.keras.losses.SparseCategoricalCrossentropy(
          from_logits=True,
          reduction=tf.keras.losses.Reduction.NONE)(y, predictions)
      loss = tf.nn.compute_average_loss(per_example_loss)
      model_losses = multi_worker_model.losses
      if model_losses:
        loss += tf.nn.scale_regularization_loss(tf.add_n(model_losses))

    grads = tape.gradient(loss, multi_worker_model.trainable_variables)
    optimizer.apply_gradients(
        zip(grads, multi_worker_model.trainable_variables))
    train_accuracy.update_state(y, predictions)

    return loss

  per_replica_losses = strategy.run(step_fn, args=(next(iterator),))
  return strategy.reduce(
      tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)

epoch = tf.Variable(
    initial_value=tf.constant(0, dtype=tf.dtypes.int64), name='epoch')
step_in_epoch = tf.Variable(
    initial_value=tf.constant(0, dtype=tf.dtypes.int64),
    name='step_in_epoch')

task_type, task_id, cluster_spec = (strategy.cluster_resolver.task_type,
                                    strategy.cluster_resolver.task_id,
                                    strategy.cluster_resolver.cluster_spec())

checkpoint = tf.train.Checkpoint(
    model=multi_worker_model, epoch=epoch, step_in_epoch=step_in_epoch)

write_checkpoint_dir = write_filepath(checkpoint_dir, task_type, task_id,
                                      cluster_spec)
checkpoint_manager = tf.train.CheckpointManager(
    checkpoint, directory=write_checkpoint_dir, max_to_keep=1)

latest_checkpoint = tf.train.latest_checkpoint(checkpoint_dir)
if latest_checkpoint:
  checkpoint.restore(latest_checkpoint)

while epoch.numpy() < num_epochs:
  iterator = iter(multi_worker_dataset)
  total_loss = 0.0
  num_batches = 0

  while step_in_epoch.numpy() < num_steps_per_epoch:
    total_loss += train_step(iterator)
    num_batches += 1
    step_in_epoch.assign_add(1)

  train_loss = total_loss / num_batches
  print('Epoch: %d, accuracy: %f, train_loss: %f.'
                %(epoch.numpy(), train_accuracy.result(), train_loss))

  train_accuracy.reset_states()

  checkpoint_manager.save()
  if not _is_chief(task_type, task_id, cluster_spec):
    tf.io.gfile.rmtree(write_checkpoint_dir)

  epoch.assign_add(1)
  step_in_epoch.assign(0)
"""

# Keras 3 spells these two tf-keras names differently; nothing else of the tutorial changes.
KERAS3_SPELLINGS = {"reduction=tf.keras.losses.Reduction.NONE": "reduction='none'",
                    "train_accuracy.reset_states()": "train_accuracy.reset_state()"}


def ctl_tutorial(flags: str) -> str:
    code = CTL_TUTORIAL_MAIN
    if flags == "--keras 3":
        for tf_keras_name, keras3_name in KERAS3_SPELLINGS.items():
            assert tf_keras_name in code
            code = code.replace(tf_keras_name, keras3_name)
    return CTL_TUTORIAL_MODULE + code


def on_every_worker(kernel, expression: str) -> list:
    out = kernel.ok(f"%%tfdist --all-output\nimport json\nprint('VALUE', json.dumps({expression}))")
    rows = sorted(line.split("] VALUE ", 1) for line in out.stdout.splitlines()
                  if "] VALUE " in line)
    assert len(rows) == 2, out.stdout
    return [json.loads(value) for _, value in rows]


def weights_digest(name: str) -> str:
    return ("__import__('hashlib').sha256(b''.join(w.tobytes() for w in "
            f"{name}.get_weights())).hexdigest()")


def test_the_custom_loop_tutorials_own_worker_directory_is_used_as_named(kernel):
    shared = os.path.join(kernel.cwd, "ctl")
    os.makedirs(shared)
    code = f"%%tfdist --no-checkpoint\nSHARED_DIR = {shared!r}\n" + ctl_tutorial(kernel.flags)
    out = kernel.ok(code, timeout=400)
    assert "Epoch: 2, accuracy:" in out.stdout, out.stdout
    # The chief's checkpoint (max_to_keep=1), and worker 1's own directory, made, written
    # and emptied by the tutorial's code as on any cluster.
    saved = sorted(os.listdir(os.path.join(shared, "ckpt")))
    assert saved == ["checkpoint", "ckpt-3.data-00000-of-00001", "ckpt-3.index"], saved
    assert os.listdir(os.path.join(shared, "workertemp_1")) == []
    # Every worker restores the chief's checkpoint, as the tutorial's code does at its start
    # (saved before the epoch counter moved on: epoch 2, all 5 steps of it done).
    latest = on_every_worker(kernel, "tf.train.latest_checkpoint(checkpoint_dir)")
    assert latest == [os.path.join(shared, "ckpt", "ckpt-3")] * 2
    kernel.ok("%%tfdist\ncheckpoint.restore(tf.train.latest_checkpoint(checkpoint_dir))")
    assert on_every_worker(kernel, "[int(epoch.numpy()), int(step_in_epoch.numpy())]") == [
        [2, 5], [2, 5]]


KERAS_TUTORIAL = """\
import os
import pathlib

datasets = {name: tf.data.Dataset.from_tensor_slices((images[..., None], labels))
            for name, (images, labels) in zip(("train", "test"), load_data())}
mnist_train, mnist_test = datasets['train'], datasets['test']

strategy = tf.distribute.MultiWorkerMirroredStrategy()

BUFFER_SIZE = 10000
BATCH_SIZE_PER_REPLICA = 64
BATCH_SIZE = BATCH_SIZE_PER_REPLICA * strategy.num_replicas_in_sync

def scale(image, label):
  image = tf.cast(image, tf.float32)
  image /= 255

  return image, label

train_dataset = mnist_train.map(scale).cache().shuffle(BUFFER_SIZE).batch(BATCH_SIZE)
eval_dataset = mnist_test.map(scale).batch(BATCH_SIZE)

with strategy.scope():
  model = tf.keras.Sequential([
      tf.keras.layers.Conv2D(32, 3, activation='relu', input_shape=(28, 28, 1)),
      tf.keras.layers.MaxPooling2D(),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(64, activation='relu'),
      tf.keras.layers.Dense(10)
  ])

  model.compile(loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                optimizer=tf.keras.optimizers.Adam(learning_rate=0.001),
                metrics=['accuracy'])

checkpoint_dir = './training_checkpoints'
checkpoint_prefix = os.path.join(checkpoint_dir, "ckpt_{epoch:04d}.weights.h5")

def decay(epoch):
  if epoch < 3:
    return 1e-3
  elif epoch >= 3 and epoch < 7:
    return 1e-4
  else:
    return 1e-5

class PrintLR(tf.keras.callbacks.Callback):
  def on_epoch_end(self, epoch, logs=None):
    print('\\nLearning rate for epoch {} is {}'.format(epoch + 1,
                                                      model.optimizer.learning_rate.numpy()))

callbacks = [
    tf.keras.callbacks.TensorBoard(log_dir='./logs'),
    tf.keras.callbacks.ModelCheckpoint(filepath=checkpoint_prefix,
                                       save_weights_only=True),
    tf.keras.callbacks.LearningRateScheduler(decay),
    PrintLR()
]

EPOCHS = 4

model.fit(train_dataset, epochs=EPOCHS, callbacks=callbacks)

latest_checkpoint = sorted(pathlib.Path(checkpoint_dir).glob('*'))[-1]

model.load_weights(latest_checkpoint)

eval_loss, eval_acc = model.evaluate(eval_dataset)

print('Eval loss: {}, Eval accuracy: {}'.format(eval_loss, eval_acc))

path = 'my_model.keras'
model.save(path)

unreplicated_model = tf.keras.models.load_model(path)

unreplicated_model.compile(
    loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    optimizer=tf.keras.optimizers.Adam(),
    metrics=['accuracy'])

eval_loss, eval_acc = unreplicated_model.evaluate(eval_dataset)

print('Eval loss: {}, Eval Accuracy: {}'.format(eval_loss, eval_acc))

with strategy.scope():
  replicated_model = tf.keras.models.load_model(path)
  replicated_model.compile(loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                           optimizer=tf.keras.optimizers.Adam(),
                           metrics=['accuracy'])

  eval_loss, eval_acc = replicated_model.evaluate(eval_dataset)
  print ('Eval loss: {}, Eval Accuracy: {}'.format(eval_loss, eval_acc))
"""


def test_every_worker_loads_the_chiefs_newest_weights_file(kernel):
    if kernel.flags != "--keras 2":
        pytest.skip("the tutorial's tf-keras fit: on Keras 3 see tests/test_keras3.py")
    kernel.ok("%%tfdist --no-checkpoint\n" + KERAS_TUTORIAL, timeout=600)
    saved = sorted(os.listdir(os.path.join(kernel.cwd, "training_checkpoints")))
    assert saved == [f"ckpt_{epoch:04d}.weights.h5" for epoch in (1, 2, 3, 4)], saved
    assert on_every_worker(kernel, "str(latest_checkpoint)") == [
        "training_checkpoints/ckpt_0004.weights.h5"] * 2
    # Both loaded the same weights (the chief's file), and found the same accuracy with them.
    loaded = on_every_worker(kernel, weights_digest("model"))
    assert loaded[0] == loaded[1]
    replicated = on_every_worker(kernel, weights_digest("replicated_model"))
    assert replicated == loaded
    accuracy = on_every_worker(kernel, "float(eval_acc)")
    assert accuracy[0] == accuracy[1] and accuracy[0] > 0.5, accuracy


H5_UNDER_A_STRATEGY = """\
import os, sys, tempfile
os.environ["TF_USE_LEGACY_KERAS"] = "1"
import numpy as np
import tensorflow as tf
from tfmw_notebook.worker.corrections import tf_keras_h5_loading

tf_keras_h5_loading.install()
strategy = tf.distribute.MirroredStrategy()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(2, input_shape=(3,))])
    model.compile(loss="mse", optimizer="adam", metrics=["accuracy"])
model.fit(np.ones((8, 3)), np.ones((8, 2)), epochs=1, verbose=0)
path = os.path.join(tempfile.mkdtemp(), "w.weights.h5")
model.save_weights(path)
saved = [w.copy() for w in model.get_weights()]
for variable in model.weights:
    variable.assign(tf.zeros_like(variable))
model.load_weights(path)
assert all((a == b).all() for a, b in zip(model.get_weights(), saved))
print("LOADED", type(model.metrics[0].variables[0]).__name__)
"""


@pytest.mark.timeout(120)
def test_tf_keras_loads_a_weights_h5_file_under_a_strategy(tmp_path):
    """Fact 17's cause, in one process (a metric's sum-on-read variables exist under any
    mirrored strategy): the h5 store's datasets reach `assign`, which divides them."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
        os.environ.get("PYTHONPATH"))))}
    done = subprocess.run([sys.executable, "-c", H5_UNDER_A_STRATEGY], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=100)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "LOADED SyncOnReadVariable" in done.stdout


KERAS_SAVES_IN_A_THREAD = """\
import os, sys, tempfile, threading, zipfile
import tf_keras
if sys.argv[1] == "corrected":
    from tfmw_notebook.worker.corrections import tf_keras_saving_format
    tf_keras_saving_format.install()
folder = tempfile.mkdtemp()
model = tf_keras.Sequential([tf_keras.layers.Dense(1, input_shape=(2,))])
def save_twice():
    for name in ("first.keras", "second.keras"):
        model.save(os.path.join(folder, name))
        print(name, zipfile.is_zipfile(os.path.join(folder, name)))
thread = threading.Thread(target=save_twice)   # the workers' cells run outside the main thread
thread.start()
thread.join()
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["as shipped", "corrected"])
def test_tf_keras_saves_keras_archives_in_any_thread(tmp_path, mode):
    """tf-keras' archive-format flag is per thread and a save outside the importing thread
    turns it off: the second `.keras` save was an HDF5 file (as shipped, asserted so that the
    correction keeps a reason to exist); corrected, both are archives."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3",
           "PYTHONPATH": os.pathsep.join(filter(None, (
               os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
               os.environ.get("PYTHONPATH"))))}
    done = subprocess.run([sys.executable, "-c", KERAS_SAVES_IN_A_THREAD,
                           mode.split()[-1]], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=100)
    assert done.returncode == 0, done.stderr[-3000:]
    second = "True" if mode == "corrected" else "False"
    assert done.stdout.split() == ["first.keras", "True", "second.keras", second], done.stdout


# Once in CI, beside another module's tests, a collective of these two processes was aborted
# (the logs were cut off; the message now shows them whole): it runs alone.
@pytest.mark.timeout(150)
@pytest.mark.alone
def test_every_worker_loads_the_newest_weights_file_in_two_plain_processes(tmp_path):
    """The Keras tutorial's read-back on two plain processes with TF_CONFIG, the workers'
    modules installed as their bootstrap does (tests/two_process_harness.py): no heartbeat,
    so a busy machine cannot restart them."""
    scenario = "tfk_tutorial_newest_weights"
    summary = run_pair([scenario], str(tmp_path / "work"), str(tmp_path / "run"),
                       iterations=3, deadline=120)
    ranks = [rank and rank["scenarios"][scenario] for rank in summary["ranks"]]
    assert not summary["hung"] and all(ranks), "\n".join(summary["logs"])
    for outcome in ranks:
        assert outcome["write_errors"] == outcome["read_errors"] == [], outcome
    chief, other = (outcome["notes"] for outcome in ranks)
    assert chief["latest"] == other["latest"] == "tutorial_ckpts/ckpt_0003.weights.h5"
    assert chief == other                       # the same weights loaded, the same loss
    assert sorted(summary["named_files"]) == ["tutorial_ckpts/"] + [
        f"tutorial_ckpts/ckpt_{epoch:04d}.weights.h5" for epoch in (1, 2, 3)]
