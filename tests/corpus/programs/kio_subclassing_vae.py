"""Making new layers and models via subclassing (keras.io guide, Keras 3), its end-to-end
example: a Variational AutoEncoder as a `keras.Model` subclass built from nested
`Layer` subclasses (Sampling with `keras.random.normal`, Encoder, Decoder), adding its KL
divergence with `self.add_loss` in `call()`, compiled with an MSE loss and trained with
`fit(x, x)` on MNIST digits."""

from corpus.offline_data import PATCH_KERAS_DATASETS, seeded

SOURCE = {
    "repository": "keras-team/keras-io",
    "commit": "979102fe166d2e5a4ada5e33d82c99a388eed2da",
    "path": "guides/keras_core/making_new_layers_and_models_via_subclassing.py",
    "title": "Making new layers and models via subclassing",
}
KERAS = "default"
CHANGES = [
    "keras.datasets.mnist.load_data() answers offline (DATA): scikit-learn's digits at "
    "MNIST's 28x28 uint8 in [0, 255], 1,500 training images",
    "Setup: `import keras_core as keras` and `from keras_core import ...` -> `keras` "
    "(this revision predates Keras Core's release as Keras 3; keras_core is not installed)",
    "sizes: x_train.reshape(60000, 784) -> reshape(-1, 784) (the stand-in has 1,500 images)",
    "cells: the guide's Setup, then its section 'Putting it all together: an end-to-end "
    "example' (the VAE classes, then the fit); the earlier sections only build and call "
    "single layers and are cut",
    "DATA seeds every generator (`corpus.offline_data.seeded(1)`): the program's shuffles "
    "and initial weights are unseeded; seeded, every worker starts and shuffles as one "
    "process does, so its loss can be compared tightly",
]
DATA = PATCH_KERAS_DATASETS + seeded(1)
CELLS = [
    r'''import numpy as np
import keras
from keras import ops
from keras import layers''',
    r'''class Sampling(layers.Layer):
    """Uses (z_mean, z_log_var) to sample z, the vector encoding a digit."""

    def call(self, inputs):
        z_mean, z_log_var = inputs
        batch = ops.shape(z_mean)[0]
        dim = ops.shape(z_mean)[1]
        epsilon = keras.random.normal(shape=(batch, dim))
        return z_mean + ops.exp(0.5 * z_log_var) * epsilon


class Encoder(layers.Layer):
    """Maps MNIST digits to a triplet (z_mean, z_log_var, z)."""

    def __init__(self, latent_dim=32, intermediate_dim=64, name="encoder", **kwargs):
        super().__init__(name=name, **kwargs)
        self.dense_proj = layers.Dense(intermediate_dim, activation="relu")
        self.dense_mean = layers.Dense(latent_dim)
        self.dense_log_var = layers.Dense(latent_dim)
        self.sampling = Sampling()

    def call(self, inputs):
        x = self.dense_proj(inputs)
        z_mean = self.dense_mean(x)
        z_log_var = self.dense_log_var(x)
        z = self.sampling((z_mean, z_log_var))
        return z_mean, z_log_var, z


class Decoder(layers.Layer):
    """Converts z, the encoded digit vector, back into a readable digit."""

    def __init__(self, original_dim, intermediate_dim=64, name="decoder", **kwargs):
        super().__init__(name=name, **kwargs)
        self.dense_proj = layers.Dense(intermediate_dim, activation="relu")
        self.dense_output = layers.Dense(original_dim, activation="sigmoid")

    def call(self, inputs):
        x = self.dense_proj(inputs)
        return self.dense_output(x)


class VariationalAutoEncoder(keras.Model):
    """Combines the encoder and decoder into an end-to-end model for training."""

    def __init__(
        self,
        original_dim,
        intermediate_dim=64,
        latent_dim=32,
        name="autoencoder",
        **kwargs
    ):
        super().__init__(name=name, **kwargs)
        self.original_dim = original_dim
        self.encoder = Encoder(latent_dim=latent_dim, intermediate_dim=intermediate_dim)
        self.decoder = Decoder(original_dim, intermediate_dim=intermediate_dim)

    def call(self, inputs):
        z_mean, z_log_var, z = self.encoder(inputs)
        reconstructed = self.decoder(z)
        # Add KL divergence regularization loss.
        kl_loss = -0.5 * ops.mean(
            z_log_var - ops.square(z_mean) - ops.exp(z_log_var) + 1
        )
        self.add_loss(kl_loss)
        return reconstructed''',
    r'''(x_train, _), _ = keras.datasets.mnist.load_data()
x_train = x_train.reshape(-1, 784).astype("float32") / 255

original_dim = 784
vae = VariationalAutoEncoder(784, 64, 32)

optimizer = keras.optimizers.Adam(learning_rate=1e-3)
vae.compile(optimizer, loss=keras.losses.MeanSquaredError())

vae.fit(x_train, x_train, epochs=2, batch_size=64)''',
]
MODEL = "vae"
LOSS = "vae.history.history['loss'][-1]"
# Seeded: the same start and global batches as one process; the sampling noise is
# drawn per replica (measured 2026-11-26: 0.107228 vs 0.107230).
TOLERANCE = 0.05
ONE_PROCESS = {}
EXPECT_ERROR = None
