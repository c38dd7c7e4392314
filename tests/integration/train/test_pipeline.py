from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tfbatch.errors import NotFound
from tfbatch.train.data import write_digits
from tfbatch.train.dataset_info import read_info
from tfbatch.train.pipeline import Augment, augment_image, split_dataset


@pytest.fixture(scope="module")
def digits_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("digits")
    write_digits(root)
    return root


def test_batches_are_scaled_like_serving(digits_dir, digits_split):
    info = read_info(digits_dir)
    images, labels = next(iter(split_dataset(digits_dir, "eval", info, batch_size=7)))
    assert images.dtype == tf.float32 and images.shape == (7, 8, 8, 1)
    _, _, x_test, y_test = digits_split
    np.testing.assert_array_equal(images.numpy()[..., 0], x_test[:7] / np.float32(255.0))
    np.testing.assert_array_equal(labels.numpy(), y_test[:7])


def test_shards_are_disjoint_and_cover_the_split(digits_dir):
    info = read_info(digits_dir)
    seen = []
    for index in range(2):
        dataset = split_dataset(digits_dir, "validation", info, batch_size=1000,
                                shuffle_seed=3, shard=(2, index))
        images, _ = next(iter(dataset))
        seen.append({im.tobytes() for im in images.numpy()})
    assert not seen[0] & seen[1]
    assert len(seen[0]) + len(seen[1]) >= info.counts["validation"] - 5  # duplicates in digits


def test_augment_pad_crop_flip():
    image = tf.reshape(tf.range(16 * 16 * 3, dtype=tf.float32), (16, 16, 3))
    seeds = [tf.constant([i, 7 * i + 1], tf.int64) for i in range(20)]
    outputs = [augment_image(image, Augment(pad=2, flip=True), s).numpy() for s in seeds]
    assert all(o.shape == (16, 16, 3) for o in outputs)
    assert any(not np.array_equal(o, image.numpy()) for o in outputs)
    # the seed alone decides: the same seed, the same crop and flip
    again = [augment_image(image, Augment(pad=2, flip=True), s).numpy() for s in seeds]
    assert all(np.array_equal(a, b) for a, b in zip(outputs, again))
    # no flip, no pad: the identity (what digits need)
    np.testing.assert_array_equal(augment_image(image, Augment.none(), seeds[0]).numpy(), image.numpy())
    flipped_only = augment_image(image, Augment(pad=0, flip=True), seeds[1]).numpy()
    assert np.array_equal(flipped_only, image.numpy()) or np.array_equal(
        flipped_only, image.numpy()[:, ::-1])


def test_augmented_batches_are_the_same_on_every_run_and_new_every_epoch(digits_dir):
    """Parallel map calls draw no stateful randomness: two datasets built alike give the same
    batches (a seeded training run is repeatable), and a second pass over one gives new crops."""
    info = read_info(digits_dir)

    def batches(dataset):
        return [images.numpy() for images, _ in dataset]

    make = lambda: split_dataset(digits_dir, "train", info, batch_size=64, augment=Augment(pad=2, flip=True),
                                 shuffle_seed=3)
    first, second = make(), make()
    epoch1 = batches(first)
    assert all(np.array_equal(a, b) for a, b in zip(epoch1, batches(second)))
    assert not all(np.array_equal(a, b) for a, b in zip(epoch1, batches(first)))


def test_missing_split(digits_dir, tmp_path):
    info = read_info(digits_dir)
    with pytest.raises(NotFound, match="split 'train'"):
        split_dataset(tmp_path, "train", info, batch_size=1)
