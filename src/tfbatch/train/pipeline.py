"""tf.data input from the TFRecords written by :mod:`tfbatch.train.data`.

Scaling uses :func:`tfbatch.train.export.scale_pixels`, the function the exported
serving graph applies, so training and serving see identical inputs. Augmentation
is the CIFAR-10 example's pad-crop-flip, each part switchable: a horizontal flip turns a
CIFAR truck into a truck, but a digit 2 into something that is not a 2.
"""

from __future__ import annotations

from pathlib import Path

import tensorflow as tf
from pydantic import BaseModel, Field

from tfbatch.errors import NotFound
from tfbatch.train.dataset_info import DatasetInfo, parse_example, split_path
from tfbatch.train.export import scale_pixels


class Augment(BaseModel):
    pad: int = Field(4, ge=0, description="zero-pad each side, then random-crop back; 0 = off")
    flip: bool = Field(True, description="random left-right flip")

    @classmethod
    def none(cls) -> "Augment":
        return cls(pad=0, flip=False)


def augment_image(image: tf.Tensor, augment: Augment, seed: tf.Tensor) -> tf.Tensor:
    """float32 [H, W, C] -> same shape, randomly shifted by up to ``pad`` pixels and flipped.

    ``seed`` (int64 [2]) drives stateless random ops, so the crop and flip of every record
    are fixed by the dataset's seed stream, not by which of the map's parallel calls ran
    first: a seeded training run gives the same model every time.
    """
    if augment.pad:
        height, width, channels = image.shape
        padded = tf.image.resize_with_crop_or_pad(image, height + 2 * augment.pad, width + 2 * augment.pad)
        image = tf.image.stateless_random_crop(padded, [height, width, channels], seed=seed)
    if augment.flip:
        image = tf.image.stateless_random_flip_left_right(image, seed=seed[::-1])
    return image


def split_dataset(
    root: str | Path,
    split: str,
    info: DatasetInfo,
    *,
    batch_size: int,
    augment: Augment | None = None,
    shuffle_seed: int | None = None,
    shard: tuple[int, int] = (1, 0),
    drop_remainder: bool = False,
) -> tf.data.Dataset:
    """Batches of (float32 images in [0, 1], int64 labels) from one split.

    ``shard=(count, index)`` keeps every count-th record, so each worker of a
    multi-worker job reads a disjoint part; it is applied before shuffling so the
    parts stay disjoint whatever the seed.
    """
    path = split_path(root, split)
    if not path.is_file():
        raise NotFound(f"dataset {root}: split {split!r} expected at {path}, not found")
    dataset = tf.data.TFRecordDataset(str(path))
    count, index = shard
    if count > 1:
        dataset = dataset.shard(count, index)
    if shuffle_seed is not None:
        dataset = dataset.shuffle(10_000, seed=shuffle_seed, reshuffle_each_iteration=False)

    def prepare(record, draw=None):
        image, label = parse_example(record, info)
        image = scale_pixels(image)
        if augment is not None:
            image = augment_image(image, augment, tf.stack([draw, tf.constant(0, tf.int64)]))
        return image, label

    if augment is not None:
        # One draw per record from a seeded stream that moves on every epoch
        # (rerandomize_each_iteration): each epoch sees new crops, and a rerun the same ones.
        # One int64 per record, not a batch(2) of them: on digits the batch op per record
        # cost 14 % of the training throughput.
        draws = tf.data.Dataset.random(seed=shuffle_seed or 0, rerandomize_each_iteration=True)
        dataset = tf.data.Dataset.zip((dataset, draws))
    dataset = dataset.map(prepare, num_parallel_calls=tf.data.AUTOTUNE)
    return dataset.batch(batch_size, drop_remainder=drop_remainder).prefetch(tf.data.AUTOTUNE)
