"""Keras model definitions: the CIFAR-10 CNN of SageMaker's example and a small CNN for 8x8 digits.

Models take float32 images scaled to [0, 1] (the exported serving graph applies the
same scaling) and end in softmax, so outputs are class probabilities.
"""

from __future__ import annotations

import keras
from keras import layers


def _conv_block(x, filters: int, dropout: float):
    for _ in range(2):
        x = layers.Conv2D(filters, 3, padding="same", use_bias=False)(x)
        x = layers.BatchNormalization()(x)
        x = layers.Activation("relu")(x)
    x = layers.MaxPooling2D(2)(x)
    return layers.Dropout(dropout)(x)


def build_cifar_cnn(input_shape: tuple[int, int, int] = (32, 32, 3), classes: int = 10) -> keras.Model:
    """The CIFAR-10 example's CNN: conv blocks of 32/64/128 filters with batch norm and dropout
    0.2/0.3/0.4, then dense 512, dropout 0.5 and a softmax."""
    inputs = keras.Input(shape=input_shape, name="images")
    x = inputs
    for filters, dropout in ((32, 0.2), (64, 0.3), (128, 0.4)):
        x = _conv_block(x, filters, dropout)
    x = layers.Flatten()(x)
    x = layers.Dense(512, activation="relu")(x)
    x = layers.Dropout(0.5)(x)
    outputs = layers.Dense(classes, activation="softmax", name="probabilities")(x)
    return keras.Model(inputs, outputs, name="cifar_cnn")


def build_digits_cnn(input_shape: tuple[int, int, int] = (8, 8, 1), classes: int = 10) -> keras.Model:
    """A small CNN for 8x8 digits: reaches >= 0.95 test accuracy in seconds on a CPU."""
    inputs = keras.Input(shape=input_shape, name="images")
    x = layers.Conv2D(32, 3, padding="same", activation="relu")(inputs)
    x = layers.Conv2D(32, 3, padding="same", activation="relu")(x)
    x = layers.MaxPooling2D(2)(x)
    x = layers.Conv2D(64, 3, padding="same", activation="relu")(x)
    x = layers.Flatten()(x)
    x = layers.Dense(64, activation="relu")(x)
    x = layers.Dropout(0.25)(x)
    outputs = layers.Dense(classes, activation="softmax", name="probabilities")(x)
    return keras.Model(inputs, outputs, name="digits_cnn")


def build_model(name: str, input_shape: tuple[int, int, int], classes: int) -> keras.Model:
    """Look a model up by name (``cifar`` | ``digits``), for configs and the CLI."""
    builders = {"cifar": build_cifar_cnn, "digits": build_digits_cnn}
    if name not in builders:
        from tfbatch.errors import InvalidInput

        raise InvalidInput(f"model: expected one of {sorted(builders)}, got {name!r}")
    return builders[name](input_shape=input_shape, classes=classes)
