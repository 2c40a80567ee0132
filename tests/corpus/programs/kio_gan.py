"""Customizing what happens in `fit()` with TensorFlow (keras.io guide, Keras 3), its
end-to-end GAN: a `keras.Model` subclass holding a generator and a discriminator, with its
own `compile(d_optimizer, g_optimizer, loss_fn)` signature, `Mean` trackers in a
`metrics` property, a `SeedGenerator` for `keras.random`, and a `train_step` that trains
the discriminator then the generator with two tapes and two optimizers. The GAN model
has no `call()`; `fit` takes a `tf.data.Dataset` of images only."""

from corpus.offline_data import PATCH_KERAS_DATASETS, seeded

SOURCE = {
    "repository": "keras-team/keras-io",
    "commit": "b4108fbfe9f0cbad37f4f3c2bc5e4db0dd8bd2b6",
    "path": "guides/custom_train_step_in_tensorflow.py",
    "title": "Customizing what happens in `fit()` with TensorFlow",
}
KERAS = "default"
CHANGES = [
    "keras.datasets.mnist.load_data() answers offline (DATA): scikit-learn's digits at "
    "MNIST's 28x28 uint8 in [0, 255] (1,797 images for the guide's train + test)",
    "cells: the guide's Setup, then its section 'Wrapping up: an end-to-end GAN example' "
    "split where the prose splits it; the earlier sections are kio_custom_train_step",
    "sizes: gan.fit on dataset.take(100) -> dataset.take(6) batches of 64",
    "DATA seeds every generator (`corpus.offline_data.seeded(1)`): the program's shuffles "
    "and initial weights are unseeded; seeded, every worker starts and shuffles as one "
    "process does, so its loss can be compared tightly",
]
DATA = PATCH_KERAS_DATASETS + seeded(1)
CELLS = [
    r'''import os

# This guide can only be run with the TF backend.
os.environ["KERAS_BACKEND"] = "tensorflow"

import tensorflow as tf
import keras
from keras import layers
import numpy as np''',
    r'''# Create the discriminator
discriminator = keras.Sequential(
    [
        keras.Input(shape=(28, 28, 1)),
        layers.Conv2D(64, (3, 3), strides=(2, 2), padding="same"),
        layers.LeakyReLU(negative_slope=0.2),
        layers.Conv2D(128, (3, 3), strides=(2, 2), padding="same"),
        layers.LeakyReLU(negative_slope=0.2),
        layers.GlobalMaxPooling2D(),
        layers.Dense(1),
    ],
    name="discriminator",
)

# Create the generator
latent_dim = 128
generator = keras.Sequential(
    [
        keras.Input(shape=(latent_dim,)),
        # We want to generate 128 coefficients to reshape into a 7x7x128 map
        layers.Dense(7 * 7 * 128),
        layers.LeakyReLU(negative_slope=0.2),
        layers.Reshape((7, 7, 128)),
        layers.Conv2DTranspose(128, (4, 4), strides=(2, 2), padding="same"),
        layers.LeakyReLU(negative_slope=0.2),
        layers.Conv2DTranspose(128, (4, 4), strides=(2, 2), padding="same"),
        layers.LeakyReLU(negative_slope=0.2),
        layers.Conv2D(1, (7, 7), padding="same", activation="sigmoid"),
    ],
    name="generator",
)''',
    r'''class GAN(keras.Model):
    def __init__(self, discriminator, generator, latent_dim):
        super().__init__()
        self.discriminator = discriminator
        self.generator = generator
        self.latent_dim = latent_dim
        self.d_loss_tracker = keras.metrics.Mean(name="d_loss")
        self.g_loss_tracker = keras.metrics.Mean(name="g_loss")
        self.seed_generator = keras.random.SeedGenerator(1337)

    @property
    def metrics(self):
        return [self.d_loss_tracker, self.g_loss_tracker]

    def compile(self, d_optimizer, g_optimizer, loss_fn):
        super().compile()
        self.d_optimizer = d_optimizer
        self.g_optimizer = g_optimizer
        self.loss_fn = loss_fn

    def train_step(self, real_images):
        if isinstance(real_images, tuple):
            real_images = real_images[0]
        # Sample random points in the latent space
        batch_size = tf.shape(real_images)[0]
        random_latent_vectors = keras.random.normal(
            shape=(batch_size, self.latent_dim), seed=self.seed_generator
        )

        # Decode them to fake images
        generated_images = self.generator(random_latent_vectors)

        # Combine them with real images
        combined_images = tf.concat([generated_images, real_images], axis=0)

        # Assemble labels discriminating real from fake images
        labels = tf.concat(
            [tf.ones((batch_size, 1)), tf.zeros((batch_size, 1))], axis=0
        )
        # Add random noise to the labels - important trick!
        labels += 0.05 * keras.random.uniform(
            tf.shape(labels), seed=self.seed_generator
        )

        # Train the discriminator
        with tf.GradientTape() as tape:
            predictions = self.discriminator(combined_images)
            d_loss = self.loss_fn(labels, predictions)
        grads = tape.gradient(d_loss, self.discriminator.trainable_weights)
        self.d_optimizer.apply(grads, self.discriminator.trainable_weights)

        # Sample random points in the latent space
        random_latent_vectors = keras.random.normal(
            shape=(batch_size, self.latent_dim), seed=self.seed_generator
        )

        # Assemble labels that say "all real images"
        misleading_labels = tf.zeros((batch_size, 1))

        # Train the generator (note that we should *not* update the weights
        # of the discriminator)!
        with tf.GradientTape() as tape:
            predictions = self.discriminator(self.generator(random_latent_vectors))
            g_loss = self.loss_fn(misleading_labels, predictions)
        grads = tape.gradient(g_loss, self.generator.trainable_weights)
        self.g_optimizer.apply(grads, self.generator.trainable_weights)

        # Update metrics and return their value.
        self.d_loss_tracker.update_state(d_loss)
        self.g_loss_tracker.update_state(g_loss)
        return {
            "d_loss": self.d_loss_tracker.result(),
            "g_loss": self.g_loss_tracker.result(),
        }''',
    r'''# Prepare the dataset. We use both the training & test MNIST digits.
batch_size = 64
(x_train, _), (x_test, _) = keras.datasets.mnist.load_data()
all_digits = np.concatenate([x_train, x_test])
all_digits = all_digits.astype("float32") / 255.0
all_digits = np.reshape(all_digits, (-1, 28, 28, 1))
dataset = tf.data.Dataset.from_tensor_slices(all_digits)
dataset = dataset.shuffle(buffer_size=1024).batch(batch_size)

gan = GAN(discriminator=discriminator, generator=generator, latent_dim=latent_dim)
gan.compile(
    d_optimizer=keras.optimizers.Adam(learning_rate=0.0003),
    g_optimizer=keras.optimizers.Adam(learning_rate=0.0003),
    loss_fn=keras.losses.BinaryCrossentropy(from_logits=True),
)

# To limit the execution time, we only train on 100 batches. You can train on
# the entire dataset. You will need about 20 epochs to get nice results.
gan.fit(dataset.take(6), epochs=1)''',
]
MODEL = "[gan.generator, gan.discriminator]"
# The trained discriminator's loss on 128 real digits (label 0) and the trained generator's
# images of 128 fixed latent points (label 1), computed with the loss function, not a Loss
# object. Not the loss the guide's train_step logs: its `keras.losses` object scales what
# it returns by 1 / replicas under any strategy (keras/src/losses/loss.py,
# scale_loss_for_distribution), so the logged d_loss is half on 2 replicas (measured: 0.332
# on 2 workers, 0.650 in one process with no strategy). Evaluated after training, the same
# code means the same thing in both.
LOSS = ("keras.ops.mean(keras.losses.binary_crossentropy("
        "np.concatenate([np.zeros((128, 1)), np.ones((128, 1))]).astype('float32'), "
        "gan.discriminator(np.concatenate([all_digits[:128], gan.generator("
        "np.random.default_rng(0).normal(size=(128, latent_dim)).astype('float32'))])), "
        "from_logits=True))")
# Seeded; each replica draws the latent points of its half batch, one process all 64
# (measured 2026-11-26: 0.64321 vs 0.64340).
TOLERANCE = 0.05
ONE_PROCESS = {}
EXPECT_ERROR = None
