"""scikit-learn's digits: a real labelled image dataset that ships inside the wheel.

1,797 8x8 grayscale handwritten digits. No download, so the end-to-end path
(train -> export -> transform -> evaluate) runs on machines without internet.

Eval images are named as SageMaker's CIFAR-10 example names its transform input,
``<index>_<classname>.png``, with letters-only class names (``zero`` .. ``nine``):
that example scores its output with ``re.search('([a-zA-Z]+).png.out', name)``, so
its notebook code works unchanged on our output too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from tfbatch.errors import DependencyMissing, InvalidInput
from tfbatch.labels import DIGIT_CLASS_NAMES, image_filename, label_from_filename

__all__ = ["DIGIT_CLASS_NAMES", "image_filename", "label_from_filename", "load_digits_split", "write_png_folder"]


def load_digits_split(
    test_fraction: float = 0.25, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Return ``(x_train, y_train, x_test, y_test)``; images uint8 [N, 8, 8] in 0..255.

    The split is stratified per class and depends only on ``seed``.
    """
    if not 0.0 < test_fraction < 1.0:
        raise InvalidInput(f"test_fraction: expected a value in (0, 1), got {test_fraction}")
    try:
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split
    except ImportError as exc:  # an extra since scikit-learn/scipy are heavy and only the demo needs them
        raise DependencyMissing("the digits dataset ships with scikit-learn: pip install 'tfbatch[demo]'") from exc

    data = load_digits()
    # sklearn's pixels are counts 0..16 (4x4 blocks of a 32x32 bitmap); 16 -> 255.
    images = np.round(data.images * (255.0 / 16.0)).clip(0, 255).astype(np.uint8)
    labels = data.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(
        images, labels, test_size=test_fraction, random_state=seed, stratify=labels
    )
    return x_train, y_train, x_test, y_test


def write_png_folder(
    images: np.ndarray,
    labels: np.ndarray,
    out_dir: str | Path,
    *,
    upscale: int = 1,
    class_names: Sequence[str] | None = None,
) -> list[Path]:
    """Write one PNG per image (grayscale for [N,H,W] / [N,H,W,1], RGB for [N,H,W,3]).

    ``upscale`` repeats pixels (nearest neighbour) so tiny digits are viewable;
    the exported model resizes back inside its graph.
    """
    from PIL import Image

    images = np.asarray(images)
    labels = np.asarray(labels)
    if images.ndim not in (3, 4) or images.dtype != np.uint8:
        raise InvalidInput(
            f"images: expected uint8 [N, H, W] or [N, H, W, C], got {images.dtype} {list(images.shape)}"
        )
    if len(images) != len(labels):
        raise InvalidInput(f"labels: expected {len(images)} labels, got {len(labels)}")
    if upscale < 1:
        raise InvalidInput(f"upscale: expected an integer >= 1, got {upscale}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    for index, (image, label) in enumerate(zip(images, labels)):
        if image.ndim == 3 and image.shape[-1] == 1:
            image = image[..., 0]
        if upscale > 1:
            image = image.repeat(upscale, axis=0).repeat(upscale, axis=1)
        path = out / image_filename(index, int(label), class_names)
        Image.fromarray(image).save(path, format="PNG")
        paths.append(path)
    return paths
