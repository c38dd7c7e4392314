from __future__ import annotations

import re

import numpy as np
import pytest
from PIL import Image

from tfbatch.errors import InvalidInput
from tfbatch.train.digits import (
    DIGIT_CLASS_NAMES,
    label_from_filename,
    load_digits_split,
    write_png_folder,
)


def test_split_is_stratified_deterministic_and_scaled(digits_split):
    x_train, y_train, x_test, y_test = digits_split
    assert x_train.dtype == np.uint8 and x_train.shape[1:] == (8, 8)
    assert len(x_train) + len(x_test) == 1797
    assert len(x_test) == pytest.approx(1797 * 0.25, abs=1)
    assert x_train.max() == 255 and x_train.min() == 0
    # stratified: every class keeps its share in the test split
    counts = np.bincount(y_test, minlength=10)
    assert counts.min() >= 40 and counts.max() <= 48
    again = load_digits_split()
    for a, b in zip(digits_split, again):
        np.testing.assert_array_equal(a, b)
    other = load_digits_split(seed=1)
    assert not np.array_equal(other[3], y_test)


def test_png_folder_round_trips_pixels_and_labels(tmp_path, digits_split):
    _, _, x_test, y_test = digits_split
    paths = write_png_folder(x_test[:12], y_test[:12], tmp_path, upscale=3)
    assert len(paths) == 12 and paths == sorted(paths)
    for i, path in enumerate(paths):
        image = np.asarray(Image.open(path))
        assert image.shape == (24, 24) and image.dtype == np.uint8
        np.testing.assert_array_equal(image[::3, ::3], x_test[i])
        assert label_from_filename(path.name) == y_test[i]
        assert label_from_filename(path.name + ".out") == y_test[i]


def test_names_work_with_the_seed_regex(tmp_path, digits_split):
    _, _, x_test, y_test = digits_split
    paths = write_png_folder(x_test[:5], y_test[:5], tmp_path)
    for path, label in zip(paths, y_test[:5]):
        seed_label = re.search("([a-zA-Z]+).png.out", path.name + ".out").group(1)
        assert seed_label == DIGIT_CLASS_NAMES[label]


def test_label_from_filename_forms_and_errors():
    assert label_from_filename("00012_seven.png") == 7
    assert label_from_filename("s3/prefix/3_cat.png.out", ["airplane", "automobile", "bird", "cat"]) == 3
    assert label_from_filename("7_4.jpg") == 4
    with pytest.raises(InvalidInput, match="expected '<index>_<label>.png'"):
        label_from_filename("seven.png")
    with pytest.raises(InvalidInput, match="not one of the class names"):
        label_from_filename("1_dog.png")


def test_write_png_folder_rejects_bad_input(tmp_path):
    with pytest.raises(InvalidInput, match="uint8"):
        write_png_folder(np.zeros((2, 8, 8), np.float32), np.zeros(2), tmp_path)
    with pytest.raises(InvalidInput, match="expected 2 labels"):
        write_png_folder(np.zeros((2, 8, 8), np.uint8), np.zeros(3), tmp_path)
