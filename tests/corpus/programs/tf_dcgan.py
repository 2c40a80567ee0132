"""Deep Convolutional Generative Adversarial Network (TensorFlow's tutorial): a generator
(Dense, BatchNormalization, Conv2DTranspose) and a discriminator (Conv2D, Dropout) trained
together on MNIST by a single-process custom loop: one `@tf.function` `train_step` with
two `tf.GradientTape`s and two `optimizer.apply_gradients`, called directly (no
`strategy.run`) from a Python `for` loop over a shuffled, batched `tf.data` dataset; the
step draws `tf.random.normal([BATCH_SIZE, noise_dim])` (the global batch size); a PNG of
16 generated images written each epoch (matplotlib `savefig`), a `tf.train.Checkpoint` of
both models and both optimizers saved every k epochs with `checkpoint.save(prefix)`, then
`checkpoint.restore(tf.train.latest_checkpoint(dir))` and one written image opened with
PIL. The loss object has the default reduction (tf-keras refuses it under a strategy:
DESIGN.md fact 29)."""

from corpus.offline_data import PATCH_KERAS_DATASETS, seeded

SOURCE = {
    "repository": "tensorflow/docs",
    "commit": "7c3650212740204359d4ceae481abc79345541be",
    "path": "site/en/tutorials/generative/dcgan.ipynb",
    "title": "Deep Convolutional Generative Adversarial Network",
}
KERAS = "default"
CHANGES = [
    "tf.keras.datasets.mnist.load_data() answers offline (DATA): scikit-learn's digits at "
    "MNIST's 28x28 uint8 in [0, 255], 1,500 training images (6 batches of 256 an epoch, "
    "the last of 220)",
    "dropped: the licence cell, the `!pip install imageio` / `tensorflow_docs` cell, "
    "`import imageio` (not installed here), and the two GIF cells (imageio's writer, "
    "`tensorflow_docs.vis.embed`): they only assemble the written PNGs into an animation",
    "sizes: EPOCHS 50 -> 3, a checkpoint every 15 epochs -> every 2 (`(epoch + 1) % 15` "
    "and its comment; so the restore cell still goes back to the last checkpoint, epoch 2, "
    "not to the end of training, as the tutorial's restores epoch 45 of 50)",
    "DATA seeds every generator (`corpus.offline_data.seeded(1)`): the tutorial's shuffle, "
    "its models' start, its fixed `seed` images and its noise are unseeded; seeded, every "
    "worker shuffles, starts and draws as one process does",
]
DATA = PATCH_KERAS_DATASETS + seeded(1)
CELLS = [
    r'''import tensorflow as tf''',
    r'''tf.__version__''',
    r'''import glob
import matplotlib.pyplot as plt
import numpy as np
import os
import PIL
from tensorflow.keras import layers
import time

from IPython import display''',
    r'''(train_images, train_labels), (_, _) = tf.keras.datasets.mnist.load_data()''',
    r'''train_images = train_images.reshape(train_images.shape[0], 28, 28, 1).astype('float32')
train_images = (train_images - 127.5) / 127.5  # Normalize the images to [-1, 1]''',
    r'''BUFFER_SIZE = 60000
BATCH_SIZE = 256''',
    r'''# Batch and shuffle the data
train_dataset = tf.data.Dataset.from_tensor_slices(train_images).shuffle(BUFFER_SIZE).batch(BATCH_SIZE)''',
    r'''def make_generator_model():
    model = tf.keras.Sequential()
    model.add(layers.Dense(7*7*256, use_bias=False, input_shape=(100,)))
    model.add(layers.BatchNormalization())
    model.add(layers.LeakyReLU())

    model.add(layers.Reshape((7, 7, 256)))
    assert model.output_shape == (None, 7, 7, 256)  # Note: None is the batch size

    model.add(layers.Conv2DTranspose(128, (5, 5), strides=(1, 1), padding='same', use_bias=False))
    assert model.output_shape == (None, 7, 7, 128)
    model.add(layers.BatchNormalization())
    model.add(layers.LeakyReLU())

    model.add(layers.Conv2DTranspose(64, (5, 5), strides=(2, 2), padding='same', use_bias=False))
    assert model.output_shape == (None, 14, 14, 64)
    model.add(layers.BatchNormalization())
    model.add(layers.LeakyReLU())

    model.add(layers.Conv2DTranspose(1, (5, 5), strides=(2, 2), padding='same', use_bias=False, activation='tanh'))
    assert model.output_shape == (None, 28, 28, 1)

    return model''',
    r'''generator = make_generator_model()

noise = tf.random.normal([1, 100])
generated_image = generator(noise, training=False)

plt.imshow(generated_image[0, :, :, 0], cmap='gray')''',
    r'''def make_discriminator_model():
    model = tf.keras.Sequential()
    model.add(layers.Conv2D(64, (5, 5), strides=(2, 2), padding='same',
                                     input_shape=[28, 28, 1]))
    model.add(layers.LeakyReLU())
    model.add(layers.Dropout(0.3))

    model.add(layers.Conv2D(128, (5, 5), strides=(2, 2), padding='same'))
    model.add(layers.LeakyReLU())
    model.add(layers.Dropout(0.3))

    model.add(layers.Flatten())
    model.add(layers.Dense(1))

    return model''',
    r'''discriminator = make_discriminator_model()
decision = discriminator(generated_image)
print (decision)''',
    r'''# This method returns a helper function to compute cross entropy loss
cross_entropy = tf.keras.losses.BinaryCrossentropy(from_logits=True)''',
    r'''def discriminator_loss(real_output, fake_output):
    real_loss = cross_entropy(tf.ones_like(real_output), real_output)
    fake_loss = cross_entropy(tf.zeros_like(fake_output), fake_output)
    total_loss = real_loss + fake_loss
    return total_loss''',
    r'''def generator_loss(fake_output):
    return cross_entropy(tf.ones_like(fake_output), fake_output)''',
    r'''generator_optimizer = tf.keras.optimizers.Adam(1e-4)
discriminator_optimizer = tf.keras.optimizers.Adam(1e-4)''',
    r'''checkpoint_dir = './training_checkpoints'
checkpoint_prefix = os.path.join(checkpoint_dir, "ckpt")
checkpoint = tf.train.Checkpoint(generator_optimizer=generator_optimizer,
                                 discriminator_optimizer=discriminator_optimizer,
                                 generator=generator,
                                 discriminator=discriminator)''',
    r'''EPOCHS = 3
noise_dim = 100
num_examples_to_generate = 16

# You will reuse this seed overtime (so it's easier)
# to visualize progress in the animated GIF)
seed = tf.random.normal([num_examples_to_generate, noise_dim])''',
    r'''# Notice the use of `tf.function`
# This annotation causes the function to be "compiled".
@tf.function
def train_step(images):
    noise = tf.random.normal([BATCH_SIZE, noise_dim])

    with tf.GradientTape() as gen_tape, tf.GradientTape() as disc_tape:
      generated_images = generator(noise, training=True)

      real_output = discriminator(images, training=True)
      fake_output = discriminator(generated_images, training=True)

      gen_loss = generator_loss(fake_output)
      disc_loss = discriminator_loss(real_output, fake_output)

    gradients_of_generator = gen_tape.gradient(gen_loss, generator.trainable_variables)
    gradients_of_discriminator = disc_tape.gradient(disc_loss, discriminator.trainable_variables)

    generator_optimizer.apply_gradients(zip(gradients_of_generator, generator.trainable_variables))
    discriminator_optimizer.apply_gradients(zip(gradients_of_discriminator, discriminator.trainable_variables))''',
    r'''def train(dataset, epochs):
  for epoch in range(epochs):
    start = time.time()

    for image_batch in dataset:
      train_step(image_batch)

    # Produce images for the GIF as you go
    display.clear_output(wait=True)
    generate_and_save_images(generator,
                             epoch + 1,
                             seed)

    # Save the model every 2 epochs
    if (epoch + 1) % 2 == 0:
      checkpoint.save(file_prefix = checkpoint_prefix)

    print ('Time for epoch {} is {} sec'.format(epoch + 1, time.time()-start))

  # Generate after the final epoch
  display.clear_output(wait=True)
  generate_and_save_images(generator,
                           epochs,
                           seed)''',
    r'''def generate_and_save_images(model, epoch, test_input):
  # Notice `training` is set to False.
  # This is so all layers run in inference mode (batchnorm).
  predictions = model(test_input, training=False)

  fig = plt.figure(figsize=(4, 4))

  for i in range(predictions.shape[0]):
      plt.subplot(4, 4, i+1)
      plt.imshow(predictions[i, :, :, 0] * 127.5 + 127.5, cmap='gray')
      plt.axis('off')

  plt.savefig('image_at_epoch_{:04d}.png'.format(epoch))
  plt.show()''',
    r'''train(train_dataset, EPOCHS)''',
    r'''checkpoint.restore(tf.train.latest_checkpoint(checkpoint_dir))''',
    r'''# Display a single image using the epoch number
def display_image(epoch_no):
  return PIL.Image.open('image_at_epoch_{:04d}.png'.format(epoch_no))''',
    r'''display_image(EPOCHS)''',
]
MODEL = "[generator, discriminator]"
# The tutorial prints no loss. After the restore (the epoch-2 checkpoint): the
# discriminator's loss, in inference mode, on the first 256 real images (label 1) and the
# generator's 16 images of the fixed `seed` (label 0), with the loss function, not the
# tutorial's Loss object (tf-keras refuses its default reduction under a strategy).
LOSS = ("tf.reduce_mean(tf.keras.losses.binary_crossentropy("
        "tf.concat([tf.ones((256, 1)), tf.zeros((16, 1))], 0), "
        "discriminator(tf.concat([train_images[:256], generator(seed, training=False)], 0), "
        "training=False), from_logits=True))")
# Seeded. Drawn per replica on the workers: the discriminator's Dropout masks (each worker
# draws them for its half of the real images); the noise is `tf.random.normal([BATCH_SIZE,
# ...])`, the whole global batch's on every worker, the same as one process's when seeded,
# and `discriminator_loss` is a sum of two means (reals, fakes), so the halves' weights do
# not change. Measured 2026-11-29 in one process: each batch split in two halves (the same
# noise for both, the two tapes' gradients averaged, as the workers will): 0.28347 against
# 0.28218 (0.5% apart; there the generator's BatchNormalization also updates its moving
# statistics twice a step); redrawing every in-training draw instead
# (`tf.random.set_seed(2|3|4)` just before `train(...)`): 0.28140, 0.28146, 0.28158 (0.3%);
# without the restore cell (epoch 3's weights, not epoch 2's): 0.21984, 22% off. To be
# confirmed on 2 workers.
TOLERANCE = 0.02
ONE_PROCESS = {}
EXPECT_ERROR = None
