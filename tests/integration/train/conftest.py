"""Fixtures for the training subsystem: tiny real Keras models and real PNG bytes."""

from __future__ import annotations

import io

import numpy as np
import pytest


def png_bytes(image: np.ndarray) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.fixture(scope="session")
def encode_png():
    return png_bytes


@pytest.fixture(scope="session")
def digits_split():
    from tfbatch.train.digits import load_digits_split

    return load_digits_split()


@pytest.fixture(scope="session")
def tiny_rgb_model():
    """An untrained but deterministic 16x16x3 classifier with 4 classes."""
    import keras

    keras.utils.set_random_seed(1)
    inputs = keras.Input(shape=(16, 16, 3))
    x = keras.layers.Conv2D(4, 3, activation="relu")(inputs)
    x = keras.layers.GlobalAveragePooling2D()(x)
    outputs = keras.layers.Dense(4, activation="softmax")(x)
    return keras.Model(inputs, outputs)
