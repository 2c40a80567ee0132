"""Basic classification: Classify images of clothing (TensorFlow's Keras tutorial): a
one-hidden-layer network on Fashion-MNIST fitted from NumPy arrays, evaluated, wrapped
with a Softmax layer into a probability model and used to predict the test set and a
single image (a batch of one). Code written for one process with no strategy: on the
workers it runs inside the cluster's strategy scope."""

from corpus.offline_data import PATCH_KERAS_DATASETS, seeded

SOURCE = {
    "repository": "tensorflow/docs",
    "commit": "7c3650212740204359d4ceae481abc79345541be",
    "path": "site/en/tutorials/keras/classification.ipynb",
    "title": "Basic classification: Classify images of clothing",
}
KERAS = "default"
CHANGES = [
    "tf.keras.datasets.fashion_mnist.load_data() answers offline (DATA): scikit-learn's "
    "digits at Fashion-MNIST's 28x28 uint8 in [0, 255], 1,500 train / 297 test",
    "dropped: the licence cells and the plotting cells (the image views, `plot_image`, "
    "`plot_value_array` and the figures that use them)",
    "sizes: epochs 10 -> 2",
    "DATA seeds every generator (`corpus.offline_data.seeded(1)`): the program's shuffles "
    "and initial weights are unseeded; seeded, every worker starts and shuffles as one "
    "process does, so its loss can be compared tightly",
]
DATA = PATCH_KERAS_DATASETS + seeded(1)
CELLS = [
    r'''# TensorFlow and tf.keras
import tensorflow as tf

# Helper libraries
import numpy as np
import matplotlib.pyplot as plt

print(tf.__version__)''',
    r'''fashion_mnist = tf.keras.datasets.fashion_mnist

(train_images, train_labels), (test_images, test_labels) = fashion_mnist.load_data()''',
    r'''class_names = ['T-shirt/top', 'Trouser', 'Pullover', 'Dress', 'Coat',
               'Sandal', 'Shirt', 'Sneaker', 'Bag', 'Ankle boot']''',
    r'''train_images.shape''',
    r'''len(train_labels)''',
    r'''train_labels''',
    r'''test_images.shape''',
    r'''len(test_labels)''',
    r'''train_images = train_images / 255.0

test_images = test_images / 255.0''',
    r'''model = tf.keras.Sequential([
    tf.keras.layers.Flatten(input_shape=(28, 28)),
    tf.keras.layers.Dense(128, activation='relu'),
    tf.keras.layers.Dense(10)
])''',
    r'''model.compile(optimizer='adam',
              loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
              metrics=['accuracy'])''',
    r'''model.fit(train_images, train_labels, epochs=2)''',
    r'''test_loss, test_acc = model.evaluate(test_images,  test_labels, verbose=2)

print('\nTest accuracy:', test_acc)''',
    r'''probability_model = tf.keras.Sequential([model, 
                                         tf.keras.layers.Softmax()])''',
    r'''predictions = probability_model.predict(test_images)''',
    r'''predictions[0]''',
    r'''np.argmax(predictions[0])''',
    r'''test_labels[0]''',
    r'''# Grab an image from the test dataset.
img = test_images[1]

print(img.shape)''',
    r'''# Add the image to a batch where it's the only member.
img = (np.expand_dims(img,0))

print(img.shape)''',
    r'''predictions_single = probability_model.predict(img)

print(predictions_single)''',
    r'''np.argmax(predictions_single[0])''',
]
MODEL = "model"
# The fit's history is not kept (evaluate and predict give `model.history` a fresh
# History), so the test loss after training stands in for the final training loss.
LOSS = "test_loss"
# Seeded: the same start and global batches as one process (measured 2026-11-26:
# 0.49302828 vs 0.49302822).
TOLERANCE = 0.01
# fit() from NumPy arrays: batch_size 32 is the global batch, the same in one process.
ONE_PROCESS: dict[str, str] = {}
EXPECT_ERROR = None
