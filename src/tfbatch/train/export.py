"""Export a Keras classifier as a TF Serving / SageMaker TFS ready SavedModel.

``serving_default`` takes encoded images (``image_bytes``: PNG/JPEG/GIF/BMP bytes),
decodes, resizes and scales them inside the graph, so clients and batch jobs send
files as they are (``{"instances": [{"b64": ...}]}``) with no Python preprocessing.
``serving_tensor`` takes float32 images already in [0, 1].

The in-graph preprocessing is :func:`preprocess_encoded`; training scales uint8
pixels by 1/255 (see :mod:`tfbatch.train.pipeline`), which is the same arithmetic.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import keras
import tensorflow as tf

from tfbatch.errors import InvalidInput

SERVING_DEFAULT = "serving_default"
SERVING_TENSOR = "serving_tensor"


def scale_pixels(images: tf.Tensor) -> tf.Tensor:
    """uint8 pixels -> float32 in [0, 1]: the one scaling used by training and serving."""
    return tf.cast(images, tf.float32) / 255.0


def preprocess_encoded(
    image_bytes: tf.Tensor, image_size: tuple[int, int], channels: int
) -> tf.Tensor:
    """Decode a batch of encoded images of any sizes into float32 [N, H, W, C] in [0, 1]."""
    height, width = image_size

    def one(encoded: tf.Tensor) -> tf.Tensor:
        image = tf.io.decode_image(encoded, channels=channels, expand_animations=False)
        image = scale_pixels(image)
        shape = tf.shape(image)
        same = tf.logical_and(tf.equal(shape[0], height), tf.equal(shape[1], width))
        # Images already at the model's size skip resizing, so a PNG of a training
        # example reproduces the training input bit for bit. "area" averages whole
        # source pixels: an integer nearest-neighbour upscale comes back exactly.
        image = tf.cond(
            same,
            lambda: image,
            lambda: tf.image.resize(image, (height, width), method="area"),
        )
        return tf.ensure_shape(image, (height, width, channels))

    return tf.map_fn(
        one,
        image_bytes,
        fn_output_signature=tf.TensorSpec((height, width, channels), tf.float32),
    )


class _Servable(tf.Module):
    def __init__(self, model: keras.Model, image_size: tuple[int, int], channels: int,
                 include_classes: bool):
        super().__init__(name="servable")
        self.model = model
        self._image_size = image_size
        self._channels = channels
        self._include_classes = include_classes

    def _outputs(self, images: tf.Tensor) -> dict[str, tf.Tensor]:
        probabilities = tf.cast(self.model(images, training=False), tf.float32)
        outputs = {"probabilities": probabilities}
        if self._include_classes:
            outputs["classes"] = tf.argmax(probabilities, axis=-1, output_type=tf.int64)
        return outputs

    def serve_bytes(self, image_bytes: tf.Tensor) -> dict[str, tf.Tensor]:
        return self._outputs(preprocess_encoded(image_bytes, self._image_size, self._channels))

    def serve_tensor(self, images: tf.Tensor) -> dict[str, tf.Tensor]:
        return self._outputs(images)


def export_servable(
    model: keras.Model,
    export_dir: str | Path,
    *,
    version: int = 1,
    image_size: tuple[int, int],
    channels: int,
    class_names: Sequence[str] | None = None,
    include_classes: bool = True,
) -> Path:
    """Write ``<export_dir>/<version>/`` (a SavedModel) and return that path.

    Outputs: ``probabilities`` float32 [N, classes] and, unless ``include_classes`` is
    false, ``classes`` int64 [N]. With both, TFS row-format responses are one object
    per image (``{"probabilities": [...], "classes": k}``); with probabilities only they
    are bare lists, the shape SageMaker's CIFAR-10 example notebook parses.
    ``class_names`` are stored as ``assets.extra/class_names.json`` (TFS ignores that folder).
    """
    if version < 0:
        raise InvalidInput(f"version: expected a non-negative integer, got {version}")
    if channels not in (1, 3, 4):
        raise InvalidInput(f"channels: expected 1, 3 or 4, got {channels}")
    height, width = int(image_size[0]), int(image_size[1])
    target = Path(export_dir) / str(int(version))
    if target.exists() and any(target.iterdir()):
        raise InvalidInput(f"export directory {target} already exists and is not empty")

    module = _Servable(model, (height, width), channels, include_classes)
    serve_bytes = tf.function(
        module.serve_bytes,
        input_signature=[tf.TensorSpec([None], tf.string, name="image_bytes")],
    )
    serve_tensor = tf.function(
        module.serve_tensor,
        input_signature=[tf.TensorSpec([None, height, width, channels], tf.float32, name="images")],
    )
    tf.saved_model.save(
        module,
        str(target),
        signatures={
            SERVING_DEFAULT: serve_bytes.get_concrete_function(),
            SERVING_TENSOR: serve_tensor.get_concrete_function(),
        },
    )
    if class_names is not None:
        extra = target / "assets.extra"
        extra.mkdir(exist_ok=True)
        (extra / "class_names.json").write_text(json.dumps(list(class_names)))
    return target
