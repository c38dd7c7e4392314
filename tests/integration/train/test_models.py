from __future__ import annotations

import keras
import numpy as np
import pytest

from tfbatch.errors import InvalidInput
from tfbatch.train.models import build_cifar_cnn, build_digits_cnn, build_model


def test_cifar_cnn_matches_the_seed_architecture():
    model = build_cifar_cnn()
    assert model.output_shape == (None, 10)
    convs = [l.filters for l in model.layers if isinstance(l, keras.layers.Conv2D)]
    assert convs == [32, 32, 64, 64, 128, 128]
    dropouts = [l.rate for l in model.layers if isinstance(l, keras.layers.Dropout)]
    assert dropouts == [0.2, 0.3, 0.4, 0.5]
    dense = [l.units for l in model.layers if isinstance(l, keras.layers.Dense)]
    assert dense == [512, 10]
    assert sum(isinstance(l, keras.layers.BatchNormalization) for l in model.layers) == 6
    probs = model.predict(np.random.rand(2, 32, 32, 3).astype("float32"), verbose=0)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)


def test_digits_cnn_learns_the_real_digits(digits_split):
    x_train, y_train, x_test, y_test = digits_split
    keras.utils.set_random_seed(0)
    model = build_digits_cnn()
    model.compile(
        optimizer=keras.optimizers.Adam(2e-3), loss="sparse_categorical_crossentropy", metrics=["accuracy"]
    )
    model.fit(x_train[..., None] / 255.0, y_train, epochs=15, batch_size=32, verbose=0)
    _, accuracy = model.evaluate(x_test[..., None] / 255.0, y_test, verbose=0)
    assert accuracy >= 0.95


def test_build_model_by_name():
    assert build_model("digits", (8, 8, 1), 10).name == "digits_cnn"
    with pytest.raises(InvalidInput, match="expected one of"):
        build_model("resnet", (8, 8, 1), 10)
