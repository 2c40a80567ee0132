"""Two guides written for one process, run unchanged on two workers (Keras 3, the default).

- keras.io's "Multi-GPU distributed training with TensorFlow": compile and fit with
  validation data, evaluate, then its fault-tolerance section: ModelCheckpoint saving
  `ckpt-{epoch}.keras` after each epoch and `make_or_restore_model` loading the newest one.
- TensorFlow's "Custom training with tf.distribute.Strategy": a custom loop with
  `strategy.run`, `compute_average_loss` and `checkpoint.save(prefix)` every other epoch,
  then `checkpoint.restore(tf.train.latest_checkpoint(...))` into a new model.

Both save from every worker to the same paths, which raced before (chief_writes.py). The
only change to the guides' code: MNIST and Fashion-MNIST are downloads, so the data is
scikit-learn's digits at MNIST's size, and the strategy is the multi-worker one (its
constructor gives the cluster's shared strategy).
"""

import json
import os

import pytest

from kernel_session import kernel_with_cluster

pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("ported-guides"))
    with kernel_with_cluster(directory) as session:
        session.cwd = directory   # where the guides' relative paths land
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

KERAS_IO_GUIDE = """\
import os
import keras

def get_compiled_model():
    inputs = keras.Input(shape=(784,))
    x = keras.layers.Dense(256, activation="relu")(inputs)
    x = keras.layers.Dense(256, activation="relu")(x)
    outputs = keras.layers.Dense(10)(x)
    model = keras.Model(inputs, outputs)
    model.compile(
        optimizer=keras.optimizers.Adam(),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[keras.metrics.SparseCategoricalAccuracy()],
    )
    return model

def get_dataset():
    batch_size = 32
    num_val_samples = 300
    (x_train, y_train), (x_test, y_test) = load_data()
    x_train = x_train.reshape(-1, 784).astype("float32") / 255
    x_test = x_test.reshape(-1, 784).astype("float32") / 255
    y_train = y_train.astype("float32")
    y_test = y_test.astype("float32")
    x_val = x_train[-num_val_samples:]
    y_val = y_train[-num_val_samples:]
    x_train = x_train[:-num_val_samples]
    y_train = y_train[:-num_val_samples]
    return (
        tf.data.Dataset.from_tensor_slices((x_train, y_train)).batch(batch_size),
        tf.data.Dataset.from_tensor_slices((x_val, y_val)).batch(batch_size),
        tf.data.Dataset.from_tensor_slices((x_test, y_test)).batch(batch_size),
    )

strategy = tf.distribute.MultiWorkerMirroredStrategy()
print("Number of devices: {}".format(strategy.num_replicas_in_sync))
with strategy.scope():
    model = get_compiled_model()
train_dataset, val_dataset, test_dataset = get_dataset()
model.fit(train_dataset, epochs=2, validation_data=val_dataset)
evaluated = model.evaluate(test_dataset)
"""

KERAS_IO_FAULT_TOLERANCE = """\
checkpoint_dir = "./ckpt"
if not os.path.exists(checkpoint_dir):
    os.makedirs(checkpoint_dir)

def make_or_restore_model():
    checkpoints = [checkpoint_dir + "/" + name for name in os.listdir(checkpoint_dir)]
    if checkpoints:
        latest_checkpoint = max(checkpoints, key=os.path.getctime)
        print("Restoring from", latest_checkpoint)
        return keras.models.load_model(latest_checkpoint)
    print("Creating a new model")
    return get_compiled_model()

def run_training(epochs=1):
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = make_or_restore_model()
    callbacks = [
        keras.callbacks.ModelCheckpoint(
            filepath=checkpoint_dir + "/ckpt-{epoch}.keras", save_freq="epoch"
        )
    ]
    model.fit(train_dataset, epochs=epochs, callbacks=callbacks,
              validation_data=val_dataset, verbose=2)
    return model

run_training(epochs=1)
restored = run_training(epochs=1)
"""

TF_CUSTOM_TRAINING = """\
import os

strategy = tf.distribute.MultiWorkerMirroredStrategy()
print('Number of devices: {}'.format(strategy.num_replicas_in_sync))

(train_images, train_labels), (test_images, test_labels) = load_data()
train_images = train_images[..., None]
test_images = test_images[..., None]
train_images = train_images / np.float32(255)
test_images = test_images / np.float32(255)

BUFFER_SIZE = len(train_images)
BATCH_SIZE_PER_REPLICA = 64
GLOBAL_BATCH_SIZE = BATCH_SIZE_PER_REPLICA * strategy.num_replicas_in_sync
EPOCHS = 5

train_dataset = tf.data.Dataset.from_tensor_slices((train_images, train_labels)).shuffle(
    BUFFER_SIZE, seed=1).batch(GLOBAL_BATCH_SIZE)
test_dataset = tf.data.Dataset.from_tensor_slices((test_images, test_labels)).batch(
    GLOBAL_BATCH_SIZE)
train_dist_dataset = strategy.experimental_distribute_dataset(train_dataset)
test_dist_dataset = strategy.experimental_distribute_dataset(test_dataset)

def create_model():
    regularizer = tf.keras.regularizers.L2(1e-5)
    return tf.keras.Sequential([
        tf.keras.layers.Conv2D(32, 3, activation='relu', kernel_regularizer=regularizer),
        tf.keras.layers.MaxPooling2D(),
        tf.keras.layers.Conv2D(64, 3, activation='relu', kernel_regularizer=regularizer),
        tf.keras.layers.MaxPooling2D(),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(64, activation='relu', kernel_regularizer=regularizer),
        tf.keras.layers.Dense(10, kernel_regularizer=regularizer)
    ])

checkpoint_dir = './training_checkpoints'
checkpoint_prefix = os.path.join(checkpoint_dir, "ckpt")

with strategy.scope():
    loss_object = tf.keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, reduction='none')
    def compute_loss(labels, predictions, model_losses):
        per_example_loss = loss_object(labels, predictions)
        loss = tf.nn.compute_average_loss(per_example_loss)
        if model_losses:
            loss += tf.nn.scale_regularization_loss(tf.add_n(model_losses))
        return loss
    test_loss = tf.keras.metrics.Mean(name='test_loss')
    train_accuracy = tf.keras.metrics.SparseCategoricalAccuracy(name='train_accuracy')
    test_accuracy = tf.keras.metrics.SparseCategoricalAccuracy(name='test_accuracy')
    model = create_model()
    optimizer = tf.keras.optimizers.Adam(learning_rate=0.001)
    checkpoint = tf.train.Checkpoint(optimizer=optimizer, model=model)

def train_step(inputs):
    images, labels = inputs
    with tf.GradientTape() as tape:
        predictions = model(images, training=True)
        loss = compute_loss(labels, predictions, model.losses)
    gradients = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(gradients, model.trainable_variables))
    train_accuracy.update_state(labels, predictions)
    return loss

def test_step(inputs):
    images, labels = inputs
    predictions = model(images, training=False)
    t_loss = loss_object(labels, predictions)
    test_loss.update_state(t_loss)
    test_accuracy.update_state(labels, predictions)

@tf.function
def distributed_train_step(dataset_inputs):
    per_replica_losses = strategy.run(train_step, args=(dataset_inputs,))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)

@tf.function
def distributed_test_step(dataset_inputs):
    return strategy.run(test_step, args=(dataset_inputs,))

for epoch in range(EPOCHS):
    total_loss = 0.0
    num_batches = 0
    for x in train_dist_dataset:
        total_loss += distributed_train_step(x)
        num_batches += 1
    train_loss = total_loss / num_batches
    for x in test_dist_dataset:
        distributed_test_step(x)
    if epoch % 2 == 0:
        checkpoint.save(checkpoint_prefix)
    template = ("Epoch {}, Loss: {}, Accuracy: {}, Test Loss: {}, Test Accuracy: {}")
    print(template.format(epoch + 1, train_loss, train_accuracy.result() * 100,
                          test_loss.result(), test_accuracy.result() * 100))
    test_loss.reset_state()
    train_accuracy.reset_state()
    test_accuracy.reset_state()
"""

TF_CUSTOM_TRAINING_RESTORE = """\
eval_accuracy = tf.keras.metrics.SparseCategoricalAccuracy(name='eval_accuracy')
new_model = create_model()
new_optimizer = tf.keras.optimizers.Adam()
test_dataset = tf.data.Dataset.from_tensor_slices((test_images, test_labels)).batch(
    GLOBAL_BATCH_SIZE)

@tf.function
def eval_step(images, labels):
    predictions = new_model(images, training=False)
    eval_accuracy(labels, predictions)

checkpoint = tf.train.Checkpoint(optimizer=new_optimizer, model=new_model)
checkpoint.restore(tf.train.latest_checkpoint(checkpoint_dir))
for images, labels in test_dataset:
    eval_step(images, labels)
print('Accuracy after restoring the saved model without strategy: {}'.format(
    eval_accuracy.result() * 100))
"""


def on_every_worker(kernel, expression: str) -> list:
    out = kernel.ok(f"%%tfdist --all-output\nimport json\nprint('VALUE', json.dumps({expression}))")
    rows = sorted(line.split("] VALUE ", 1) for line in out.stdout.splitlines()
                  if "] VALUE " in line)
    assert len(rows) == 2, f"stdout:\n{out.stdout}\nstderr:\n{out.stderr}"
    return [json.loads(value) for _, value in rows]


def weights_digest(name: str) -> str:
    return ("__import__('hashlib').sha256(b''.join(w.tobytes() for w in "
            f"{name}.get_weights())).hexdigest()")


def test_the_keras_io_guide_trains_saves_and_restores(kernel):
    kernel.ok("%%tfdist --no-checkpoint\n" + KERAS_IO_GUIDE, timeout=300)
    evaluated = on_every_worker(kernel, "evaluated")
    assert evaluated[0] == evaluated[1] and evaluated[0][1] > 0.5, evaluated   # accuracy
    out = kernel.ok("%%tfdist --no-checkpoint --all-output\n" + KERAS_IO_FAULT_TOLERANCE,
                    timeout=300)
    # The second run restored the first one's last checkpoint, on both workers.
    assert out.stdout.count("Restoring from ./ckpt/ckpt-1.keras") == 2, out.stdout
    saved = sorted(os.listdir(os.path.join(kernel.cwd, "ckpt")))
    assert saved == ["ckpt-1.keras"], saved   # both runs wrote epoch 1 there, once each
    digests = on_every_worker(kernel, weights_digest("restored"))
    assert digests[0] == digests[1]


def test_the_tensorflow_custom_training_tutorial_saves_from_every_worker(kernel):
    out = kernel.ok("%%tfdist --no-checkpoint\n" + TF_CUSTOM_TRAINING, timeout=300)
    assert "Epoch 5, Loss:" in out.stdout, out.stdout
    saved = sorted(os.listdir(os.path.join(kernel.cwd, "training_checkpoints")))
    assert saved == ["checkpoint"] + [f"ckpt-{n}.{part}" for n in (1, 2, 3)
                                      for part in ("data-00000-of-00001", "index")], saved
    kernel.ok("%%tfdist --no-checkpoint\n" + TF_CUSTOM_TRAINING_RESTORE, timeout=300)
    restored = on_every_worker(kernel, "float(eval_accuracy.result())")
    assert restored[0] == restored[1] and restored[0] > 0.5, restored
    # What was restored is the last checkpoint the chief wrote (epoch 5's weights).
    same = on_every_worker(kernel, weights_digest("new_model") + " == "
                           + weights_digest("model"))
    assert same == [True, True]
