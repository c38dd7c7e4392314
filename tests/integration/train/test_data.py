from __future__ import annotations

import io
import os
import pickle
import tarfile

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from tfbatch.errors import InvalidInput, NotFound
from tfbatch.train.data import write_cifar10, write_digits, write_image_folder
from tfbatch.train.dataset_info import parse_example, read_info, split_path
from tfbatch.train.digits import label_from_filename

CIFAR_NAMES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


def _add(archive: tarfile.TarFile, name: str, obj) -> None:
    raw = pickle.dumps(obj, protocol=2)
    member = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
    member.size = len(raw)
    archive.addfile(member, io.BytesIO(raw))


def _cifar_archive(path, rows_per_batch=6, seed=0, evil=False):
    """A CIFAR-10-format archive: pickled dicts with b'data' [N, 3072] and b'labels'."""
    rng = np.random.default_rng(seed)
    batches = {}
    with tarfile.open(path, "w:gz") as archive:
        _add(archive, "batches.meta", {b"label_names": [n.encode() for n in CIFAR_NAMES]})
        for name in ["data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4",
                     "data_batch_5", "test_batch"]:
            data = rng.integers(0, 256, (rows_per_batch, 3072), dtype=np.uint8)
            labels = rng.integers(0, 10, rows_per_batch).tolist()
            batch = {b"batch_label": name.encode(), b"data": data, b"labels": labels}
            if evil and name == "test_batch":
                batch[b"payload"] = os.system  # a global outside the allowlist
            _add(archive, name, batch)
            batches[name] = (data, labels)
    return batches


def _read(root, split, info):
    dataset = tf.data.TFRecordDataset(str(split_path(root, split))).map(
        lambda r: parse_example(r, info)
    )
    images, labels = zip(*[(i.numpy(), l.numpy()) for i, l in dataset])
    return np.stack(images), np.array(labels)


def test_cifar10_splits_records_and_pngs(tmp_path):
    batches = _cifar_archive(tmp_path / "cifar-10-python.tar.gz")
    info = write_cifar10(tmp_path / "cifar-10-python.tar.gz", tmp_path / "data",
                         eval_png_dir=tmp_path / "png")
    assert info.counts == {"train": 24, "validation": 6, "eval": 6}
    assert info.layout == "CHW" and info.class_names == CIFAR_NAMES
    assert read_info(tmp_path / "data") == info

    # the raw record bytes are the archive's rows, exactly as the seed writes them
    first = next(iter(tf.data.TFRecordDataset(str(split_path(tmp_path / "data", "train")))))
    example = tf.train.Example.FromString(first.numpy())
    assert example.features.feature["image"].bytes_list.value[0] == batches["data_batch_1"][0][0].tobytes()
    assert example.features.feature["label"].int64_list.value[0] == batches["data_batch_1"][1][0]

    images, labels = _read(tmp_path / "data", "validation", info)
    data, expected_labels = batches["data_batch_5"]
    np.testing.assert_array_equal(images, data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))
    np.testing.assert_array_equal(labels, expected_labels)

    pngs = sorted((tmp_path / "png").iterdir())
    test_data, test_labels = batches["test_batch"]
    assert len(pngs) == 6
    for i, png in enumerate(pngs):
        assert label_from_filename(png.name, CIFAR_NAMES) == test_labels[i]
        assert png.name.endswith(f"_{CIFAR_NAMES[test_labels[i]]}.png")
        np.testing.assert_array_equal(
            np.asarray(Image.open(png)), test_data[i].reshape(3, 32, 32).transpose(1, 2, 0)
        )


def test_cifar10_refuses_unsafe_pickles_and_missing_batches(tmp_path):
    _cifar_archive(tmp_path / "evil.tar.gz", evil=True)
    with pytest.raises(InvalidInput, match="expected pickled numpy arrays"):
        write_cifar10(tmp_path / "evil.tar.gz", tmp_path / "out")
    with tarfile.open(tmp_path / "short.tar.gz", "w:gz") as archive:
        _add(archive, "data_batch_1", {b"data": np.zeros((1, 3072), np.uint8), b"labels": [0]})
    with pytest.raises(InvalidInput, match="missing batches"):
        write_cifar10(tmp_path / "short.tar.gz", tmp_path / "out")
    with pytest.raises(NotFound):
        write_cifar10(tmp_path / "nope.tar.gz", tmp_path / "out")


def test_image_folder(tmp_path):
    rng = np.random.default_rng(0)
    for name in ["cats", "dogs"]:
        (tmp_path / "src" / name).mkdir(parents=True)
        for i in range(10):
            size = (20 + i, 24)  # varied sizes are resized on the way in
            Image.fromarray(rng.integers(0, 256, (*size, 3), dtype=np.uint8)).save(
                tmp_path / "src" / name / f"{i}.png")
    (tmp_path / "src" / "dogs" / "notes.txt").write_text("not an image")
    info = write_image_folder(tmp_path / "src", tmp_path / "data", image_size=(16, 16),
                              channels=1, validation_fraction=0.2, eval_fraction=0.2,
                              eval_png_dir=tmp_path / "png")
    assert info.class_names == ["cats", "dogs"] and info.image_shape == (16, 16, 1)
    assert info.counts == {"train": 12, "validation": 4, "eval": 4}
    images, labels = _read(tmp_path / "data", "eval", info)
    assert images.shape == (4, 16, 16, 1) and sorted(labels) == [0, 0, 1, 1]
    names = sorted(p.name for p in (tmp_path / "png").iterdir())
    assert [n.split("_")[1] for n in names].count("cats.png") == 2


def test_digits_records(tmp_path):
    info = write_digits(tmp_path / "data", eval_png_dir=tmp_path / "png", upscale=2)
    assert info.image_shape == (8, 8, 1) and info.num_classes == 10
    assert sum(info.counts.values()) == 1797 and info.counts["eval"] == 450
    images, labels = _read(tmp_path / "data", "eval", info)
    pngs = sorted((tmp_path / "png").iterdir())
    assert len(pngs) == 450
    np.testing.assert_array_equal(np.asarray(Image.open(pngs[7]))[::2, ::2], images[7, ..., 0])
    assert label_from_filename(pngs[7].name) == labels[7]
