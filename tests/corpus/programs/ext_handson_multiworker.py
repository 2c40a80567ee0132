"""Hands-On Machine Learning (3rd edition), chapter 19's multi-worker script
(`my_mnist_multiworker_task.py`): it builds its own MultiWorkerMirroredStrategy and a
TFConfigClusterResolver, trains a Conv2D MNIST classifier (uint8 input, `Rescaling`,
SGD) created in `strategy.scope()` with `validation_data`, then saves in the SavedModel
format: the chief to the real path, the other workers to a temp dir they delete. Written
for `tf.keras` as Keras 2 (`save_format="tf"`)."""

from corpus.offline_data import PATCH_KERAS_DATASETS, seeded

SOURCE = {
    "repository": "ageron/handson-ml3",
    "commit": "e3f3f9e66d58cfa1d068a498433063a1d3fba9ef",
    "path": "19_training_and_deploying_at_scale.ipynb",
    "title": "Chapter 19 - Training and Deploying TensorFlow Models at Scale",
}
KERAS = "default"
CHANGES = [
    "tf.keras.datasets.mnist.load_data() answers offline (DATA): scikit-learn's digits "
    "at MNIST's 28x28 uint8 in [0, 255], 1,500 training and 297 test images",
    "the notebook's `%%writefile my_mnist_multiworker_task.py` cell is the program: the "
    "%%writefile line dropped, the script split into cells (strategy, data, model, fit, "
    "save); the cells that launch it with TF_CONFIG (`%%bash --bg ... python "
    "my_mnist_multiworker_task.py`) and the TensorBoard cells are not taken",
    "sizes: the validation split is the first 300 images instead of 5,000 and the "
    "training split the next 600 instead of the remaining 55,000 (the stand-in has "
    "1,500); epochs 10 -> 1",
    "DATA seeds every generator (`corpus.offline_data.seeded(1)`): the program's shuffles "
    "and initial weights are unseeded; seeded, every worker starts and shuffles as one "
    "process does, so its loss can be compared tightly",
]
DATA = PATCH_KERAS_DATASETS + seeded(1)
CELLS = [
    r'''import tempfile
import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()  # at the start!
resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
print(f"Starting task {resolver.task_type} #{resolver.task_id}")''',
    r'''# extra code – Load and split the MNIST dataset
mnist = tf.keras.datasets.mnist.load_data()
(X_train_full, y_train_full), (X_test, y_test) = mnist
X_valid, X_train = X_train_full[:300], X_train_full[300:900]
y_valid, y_train = y_train_full[:300], y_train_full[300:900]''',
    r'''with strategy.scope():
    model = tf.keras.Sequential([
        tf.keras.layers.Reshape([28, 28, 1], input_shape=[28, 28],
                                dtype=tf.uint8),
        tf.keras.layers.Rescaling(scale=1 / 255),
        tf.keras.layers.Conv2D(filters=64, kernel_size=7, activation="relu",
                               padding="same", input_shape=[28, 28, 1]),
        tf.keras.layers.MaxPooling2D(pool_size=2),
        tf.keras.layers.Conv2D(filters=128, kernel_size=3, activation="relu",
                               padding="same"), 
        tf.keras.layers.Conv2D(filters=128, kernel_size=3, activation="relu",
                               padding="same"),
        tf.keras.layers.MaxPooling2D(pool_size=2),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(units=64, activation="relu"),
        tf.keras.layers.Dropout(0.5),
        tf.keras.layers.Dense(units=10, activation="softmax"),
    ])
    model.compile(loss="sparse_categorical_crossentropy",
                  optimizer=tf.keras.optimizers.SGD(learning_rate=1e-2),
                  metrics=["accuracy"])''',
    r'''model.fit(X_train, y_train, validation_data=(X_valid, y_valid), epochs=1)''',
    r'''if resolver.task_id == 0:  # the chief saves the model to the right location
    model.save("my_mnist_multiworker_model", save_format="tf")
else:
    tmpdir = tempfile.mkdtemp()  # other workers save to a temporary directory
    model.save(tmpdir, save_format="tf")
    tf.io.gfile.rmtree(tmpdir)  # and we can delete this directory at the end!''',
]
MODEL = "model"
LOSS = "model.history.history['loss'][-1]"
# Seeded: the same start and global batches as one process, but each replica draws
# its own Dropout masks (measured 2026-11-26: 2.2941 vs 2.2969).
TOLERANCE = 0.05
ONE_PROCESS = {}
EXPECT_ERROR = None
