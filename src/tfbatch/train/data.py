"""Dataset sources -> TFRecords (see :mod:`tfbatch.train.dataset_info` for the layout).

- ``cifar10``: the ``cifar-10-python.tar.gz`` archive. data_batch_1-4 -> train,
  data_batch_5 -> validation, test_batch -> eval, as SageMaker's CIFAR-10 example splits it.
- ``images``: a folder with one subfolder per class.
- ``digits``: scikit-learn's digits (ships with the package, no download).

Each can also write the eval split as PNGs named ``<index>_<classname>.png``, the
naming SageMaker's CIFAR-10 example uses for its transform input and scoring.
"""

from __future__ import annotations

import io
import pickle
import tarfile
from pathlib import Path
from typing import Sequence

import numpy as np

from tfbatch.errors import InvalidInput, NotFound
from tfbatch.labels import CIFAR10_CLASS_NAMES
from tfbatch.train.dataset_info import DatasetInfo, write_info, write_split
from tfbatch.train.digits import DIGIT_CLASS_NAMES, load_digits_split, write_png_folder

_CIFAR_SPLITS = {
    "train": ["data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4"],
    "validation": ["data_batch_5"],
    "eval": ["test_batch"],
}
IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp"}


class _ArrayUnpickler(pickle.Unpickler):
    """CIFAR's batches are pickles; unpickling arbitrary globals runs arbitrary code,
    so only what a pickled dict of numpy arrays and lists needs is allowed."""

    _ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("copy_reg", "_reconstructor"),
        ("copyreg", "_reconstructor"),
        ("__builtin__", "object"),
        ("builtins", "object"),
        ("_codecs", "encode"),  # how protocol 2 spells bytes objects
    }

    def find_class(self, module: str, name: str):
        if (module, name) not in self._ALLOWED:
            raise InvalidInput(
                f"CIFAR batch: expected pickled numpy arrays, found a reference to {module}.{name}"
            )
        return super().find_class(module, name)


def _load_batch(raw: bytes, member: str) -> tuple[np.ndarray, np.ndarray]:
    batch = _ArrayUnpickler(io.BytesIO(raw), encoding="bytes").load()
    try:
        data = np.asarray(batch[b"data"], dtype=np.uint8)
        labels = np.asarray(batch[b"labels"], dtype=np.int64)
    except (KeyError, TypeError) as exc:
        raise InvalidInput(f"{member}: expected a dict with b'data' and b'labels'") from exc
    if data.ndim != 2 or data.shape[1] != 3 * 32 * 32 or len(data) != len(labels):
        raise InvalidInput(
            f"{member}: expected data uint8 [N, 3072] and N labels, got {list(data.shape)} "
            f"and {len(labels)} labels"
        )
    return data, labels


def read_cifar10(source: str | Path) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], list[str]]:
    """Return ``{split: (rows uint8 [N, 3072] channel-planar, labels)}`` and the class names."""
    path = Path(source)
    if not path.is_file():
        raise NotFound(f"CIFAR-10 archive {path}: not found (expected cifar-10-python.tar.gz)")
    wanted = {name: split for split, names in _CIFAR_SPLITS.items() for name in names}
    batches: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    class_names = CIFAR10_CLASS_NAMES
    with tarfile.open(path, "r:*") as archive:
        for member in archive:
            base = member.name.rsplit("/", 1)[-1]
            if not member.isfile() or (base not in wanted and base != "batches.meta"):
                continue
            raw = archive.extractfile(member).read()
            if base == "batches.meta":
                meta = _ArrayUnpickler(io.BytesIO(raw), encoding="bytes").load()
                names = meta.get(b"label_names") if isinstance(meta, dict) else None
                if names:
                    class_names = [n.decode() if isinstance(n, bytes) else str(n) for n in names]
            else:
                batches[base] = _load_batch(raw, member.name)
    missing = sorted(set(wanted) - set(batches))
    if missing:
        raise InvalidInput(f"CIFAR-10 archive {path}: missing batches {missing}")
    splits = {}
    for split, names in _CIFAR_SPLITS.items():
        rows = np.concatenate([batches[n][0] for n in names])
        labels = np.concatenate([batches[n][1] for n in names])
        splits[split] = (rows, labels)
    return splits, class_names


def write_cifar10(
    source: str | Path, out_dir: str | Path, *, eval_png_dir: str | Path | None = None
) -> DatasetInfo:
    splits, class_names = read_cifar10(source)
    out = Path(out_dir)
    info = DatasetInfo(name="cifar10", image_shape=(32, 32, 3), layout="CHW", class_names=class_names)
    for split, (rows, labels) in splits.items():
        info.counts[split] = write_split(out, split, rows, labels)
    write_info(out, info)
    if eval_png_dir is not None:
        rows, labels = splits["eval"]
        hwc = rows.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
        write_png_folder(hwc, labels, eval_png_dir, class_names=class_names)
    return info


def _stratified_split(labels: np.ndarray, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Index arrays (rest, taken); ``taken`` holds about ``fraction`` of every class."""
    rng = np.random.default_rng(seed)
    taken: list[int] = []
    for label in np.unique(labels):
        members = np.flatnonzero(labels == label)
        rng.shuffle(members)
        taken.extend(members[: int(round(len(members) * fraction))].tolist())
    mask = np.zeros(len(labels), dtype=bool)
    mask[taken] = True
    return np.flatnonzero(~mask), np.flatnonzero(mask)


def _load_image(path: Path, image_size: tuple[int, int], channels: int) -> np.ndarray:
    from PIL import Image

    with Image.open(path) as image:
        image = image.convert("L" if channels == 1 else "RGB")
        if image.size != (image_size[1], image_size[0]):
            image = image.resize((image_size[1], image_size[0]), Image.Resampling.BILINEAR)
        pixels = np.asarray(image, dtype=np.uint8)
    return pixels[..., None] if channels == 1 else pixels


def write_image_folder(
    source: str | Path,
    out_dir: str | Path,
    *,
    image_size: tuple[int, int] = (32, 32),
    channels: int = 3,
    validation_fraction: float = 0.1,
    eval_fraction: float = 0.1,
    seed: int = 0,
    eval_png_dir: str | Path | None = None,
) -> DatasetInfo:
    """Class-subfolder images -> resized uint8 TFRecords with stratified splits."""
    root = Path(source)
    if channels not in (1, 3):
        raise InvalidInput(f"channels: expected 1 or 3, got {channels}")
    if not root.is_dir():
        raise NotFound(f"image folder {root}: not found")
    class_names = sorted(p.name for p in root.iterdir() if p.is_dir())
    files: list[Path] = []
    labels: list[int] = []
    for index, name in enumerate(class_names):
        for path in sorted((root / name).rglob("*")):
            if path.suffix.lower() in IMAGE_SUFFIXES and path.is_file():
                files.append(path)
                labels.append(index)
    if not files:
        raise InvalidInput(f"image folder {root}: expected <class>/<image> files, found none")
    label_array = np.asarray(labels, dtype=np.int64)
    images = np.stack([_load_image(p, image_size, channels) for p in files])
    rest, evaluation = _stratified_split(label_array, eval_fraction, seed)
    train_idx, validation_local = _stratified_split(
        label_array[rest], validation_fraction / max(1e-9, 1 - eval_fraction), seed + 1
    )
    parts = {"train": rest[train_idx], "validation": rest[validation_local], "eval": evaluation}
    return _write_arrays(
        out_dir, Path(source).name, images, label_array, parts, class_names, eval_png_dir
    )


def write_digits(
    out_dir: str | Path,
    *,
    test_fraction: float = 0.25,
    validation_fraction: float = 0.1,
    seed: int = 0,
    eval_png_dir: str | Path | None = None,
    upscale: int = 1,
) -> DatasetInfo:
    """scikit-learn digits -> TFRecords (8x8x1); eval = the test split of load_digits_split."""
    x_train, y_train, x_test, y_test = load_digits_split(test_fraction, seed)
    images = np.concatenate([x_train, x_test])[..., None]
    labels = np.concatenate([y_train, y_test])
    train_idx, validation_idx = _stratified_split(y_train, validation_fraction, seed)
    parts = {
        "train": train_idx,
        "validation": validation_idx,
        "eval": np.arange(len(x_train), len(images)),
    }
    return _write_arrays(
        out_dir, "digits", images, labels, parts, DIGIT_CLASS_NAMES, eval_png_dir, upscale
    )


def _write_arrays(
    out_dir: str | Path,
    name: str,
    images: np.ndarray,
    labels: np.ndarray,
    parts: dict[str, np.ndarray],
    class_names: Sequence[str],
    eval_png_dir: str | Path | None,
    upscale: int = 1,
) -> DatasetInfo:
    out = Path(out_dir)
    info = DatasetInfo(
        name=name, image_shape=tuple(images.shape[1:]), layout="HWC", class_names=list(class_names)
    )
    for split, index in parts.items():
        info.counts[split] = write_split(out, split, images[index], labels[index])
    write_info(out, info)
    if eval_png_dir is not None:
        write_png_folder(
            images[parts["eval"]], labels[parts["eval"]], eval_png_dir,
            upscale=upscale, class_names=class_names,
        )
    return info
