"""On-disk image datasets as TFRecords, described by one ``dataset.json``.

Layout (SageMaker's CIFAR-10 example's, plus the description file)::

    <dir>/dataset.json
    <dir>/train/train.tfrecords
    <dir>/validation/validation.tfrecords
    <dir>/eval/eval.tfrecords

Each record is a ``tf.train.Example`` with ``image`` (raw uint8 pixel bytes) and
``label`` (int64), as that example's ``generate_cifar10_tfrecords.py`` writes them.
Raw bytes carry no shape, so ``dataset.json`` records it and the byte layout:
CIFAR-10 keeps the archive's channel-planar ``CHW`` order (records stay identical to
the example's), everything else is ``HWC``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, Literal

import numpy as np
from pydantic import BaseModel, Field

from tfbatch.errors import InvalidInput, NotFound

INFO_FILE = "dataset.json"
SPLITS = ("train", "validation", "eval")


class DatasetInfo(BaseModel):
    name: str
    image_shape: tuple[int, int, int] = Field(description="height, width, channels")
    layout: Literal["HWC", "CHW"] = "HWC"
    class_names: list[str]
    counts: dict[str, int] = Field(default_factory=dict, description="records per split")

    @property
    def num_classes(self) -> int:
        return len(self.class_names)


def split_path(root: str | Path, split: str) -> Path:
    return Path(root) / split / f"{split}.tfrecords"


def write_info(root: str | Path, info: DatasetInfo) -> Path:
    path = Path(root) / INFO_FILE
    path.write_text(info.model_dump_json(indent=2))
    return path


def read_info(root: str | Path) -> DatasetInfo:
    path = Path(root) / INFO_FILE
    if not path.is_file():
        raise NotFound(
            f"dataset {root}: expected {INFO_FILE} written by 'tfbatch data', found none"
        )
    return DatasetInfo.model_validate(json.loads(path.read_text()))


def _example(image_bytes: bytes, label: int) -> bytes:
    import tensorflow as tf

    feature = {
        "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[image_bytes])),
        "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)])),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def write_split(
    root: str | Path, split: str, images: Iterable[np.ndarray], labels: Iterable[int]
) -> int:
    """Write one split's TFRecord file; images are uint8 arrays already in the dataset's
    layout. Returns the number of records. Written to a temporary name and renamed, so a
    killed run never leaves a truncated file under the final name."""
    import tensorflow as tf

    if split not in SPLITS:
        raise InvalidInput(f"split: expected one of {SPLITS}, got {split!r}")
    path = split_path(root, split)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    count = 0
    with tf.io.TFRecordWriter(str(partial)) as writer:
        for image, label in zip(images, labels):
            image = np.asarray(image)
            if image.dtype != np.uint8:
                raise InvalidInput(f"split {split!r} record {count}: expected uint8 pixels, got {image.dtype}")
            writer.write(_example(image.tobytes(), int(label)))
            count += 1
    partial.replace(path)
    return count


def parse_example(serialized, info: DatasetInfo):
    """Graph function: a serialized Example -> (uint8 image [H, W, C], int64 label)."""
    import tensorflow as tf

    features = tf.io.parse_single_example(
        serialized,
        {"image": tf.io.FixedLenFeature([], tf.string), "label": tf.io.FixedLenFeature([], tf.int64)},
    )
    height, width, channels = info.image_shape
    pixels = tf.io.decode_raw(features["image"], tf.uint8)
    pixels = tf.ensure_shape(pixels, [height * width * channels])
    if info.layout == "CHW":
        image = tf.transpose(tf.reshape(pixels, [channels, height, width]), [1, 2, 0])
    else:
        image = tf.reshape(pixels, [height, width, channels])
    return image, features["label"]
