"""Benchmark models: real architectures exported as the seed's artifact, built once and cached.

Like the seed's ResNet-50 SavedModel, ``serving_default`` takes encoded JPEGs
(``image_bytes``, tf.string [None]) and decodes and resizes them in the graph, returning
``probabilities`` and ``classes``. ``serving_tensor`` takes decoded float32 images, for the
hand-written tf.data baseline, which decodes in its own parallel pipeline with the very same
:func:`decode_and_resize`. The archive carries a SageMaker-style ``code/inference.py``
(base64-wrap the body for TFS REST, pass the response through), so all three contenders run
the same ``model.tar.gz``. Weights are random (``weights=None``): same compute as trained ones.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Callable

IMAGE_SIZE = 224
CLASSES = 1000
SERVING_TENSOR = "serving_tensor"

# The seed's handler script, written anew: one image per request, TFS REST body with b64.
INFERENCE_SCRIPT = '''\
import base64
import json


def input_handler(data, context):
    if context.request_content_type == "application/x-image":
        payload = data.read()
        encoded = base64.b64encode(payload).decode("utf-8")
        return json.dumps({"instances": [{"b64": encoded}]})
    raise ValueError("unsupported content type {}".format(context.request_content_type))


def output_handler(response, context):
    if response.status_code != 200:
        raise ValueError(response.content.decode("utf-8"))
    return response.content, context.accept_header
'''


def _builders() -> dict[str, Callable]:
    import keras

    def tiny(input_shape, classes):
        # A few-millisecond stand-in for tests of the harness itself.
        inputs = keras.Input(input_shape)
        x = keras.layers.Conv2D(4, 3, strides=4, activation="relu")(inputs)
        x = keras.layers.GlobalAveragePooling2D()(x)
        return keras.Model(inputs, keras.layers.Dense(classes, activation="softmax")(x))

    return {
        "mobilenet_v2": lambda shape, classes: keras.applications.MobileNetV2(
            input_shape=shape, weights=None, classes=classes),
        "resnet50": lambda shape, classes: keras.applications.ResNet50(
            input_shape=shape, weights=None, classes=classes),
        "tiny": tiny,
    }


MODEL_NAMES = ("mobilenet_v2", "resnet50", "tiny")


def decode_and_resize(encoded, size: int = IMAGE_SIZE):
    """One encoded JPEG -> float32 [size, size, 3] in [-1, 1]: the model's own preprocessing."""
    import tensorflow as tf

    image = tf.io.decode_jpeg(encoded, channels=3)
    image = tf.image.resize(image, (size, size), method="bilinear")
    return tf.ensure_shape(image / 127.5 - 1.0, (size, size, 3))


def export_savedmodel(name: str, target: str | Path, *, size: int | None = None, classes: int | None = None,
                      seed: int = 0, prepare: Callable | None = None) -> Path:
    """Build ``name`` with random weights and write a SavedModel with both signatures."""
    import keras
    import tensorflow as tf

    if name not in MODEL_NAMES:
        raise ValueError(f"model {name!r}: expected one of {', '.join(MODEL_NAMES)}")
    size = size or (32 if name == "tiny" else IMAGE_SIZE)
    classes = classes or (10 if name == "tiny" else CLASSES)
    keras.utils.set_random_seed(seed)
    model = _builders()[name]((size, size, 3), classes)
    if prepare is not None:  # e.g. set weights or statistics before the graph is traced
        prepare(model)

    module = tf.Module()
    module.model = model

    def outputs(images):
        probabilities = tf.cast(module.model(images, training=False), tf.float32)
        return {"probabilities": probabilities,
                "classes": tf.argmax(probabilities, axis=-1, output_type=tf.int64)}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="image_bytes")])
    def serve_bytes(image_bytes):
        images = tf.map_fn(lambda e: decode_and_resize(e, size), image_bytes,
                           fn_output_signature=tf.TensorSpec((size, size, 3), tf.float32))
        return outputs(images)

    @tf.function(input_signature=[tf.TensorSpec([None, size, size, 3], tf.float32, name="images")])
    def serve_tensor(images):
        return outputs(images)

    module.serve_bytes, module.serve_tensor = serve_bytes, serve_tensor
    target = Path(target)
    tf.saved_model.save(module, str(target),
                        signatures={"serving_default": serve_bytes, SERVING_TENSOR: serve_tensor})
    return target


def ensure_artifact(name: str, workdir: str | Path) -> Path:
    """``<workdir>/models/<name>/`` holding ``model.tar.gz`` and ``savedmodel/1``; built once.

    Returns that folder. ``meta.json`` is written last, so its presence means complete.
    """
    from tfbatch.artifact import package

    folder = Path(workdir) / "models" / name
    meta = folder / "meta.json"
    if meta.exists():
        return folder
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    savedmodel = export_savedmodel(name, folder / "savedmodel" / "1")
    code = folder / "code"
    code.mkdir()
    (code / "inference.py").write_text(INFERENCE_SCRIPT)
    package([savedmodel], folder / "model.tar.gz", code_dir=code, versions=[1])
    size = int(tf_signature_size(savedmodel))
    meta.write_text(json.dumps({"name": name, "image_size": size, "savedmodel": "savedmodel/1",
                                "archive": "model.tar.gz"}))
    return folder


def scriptless_archive(folder: str | Path) -> Path:
    """``model-noscript.tar.gz`` next to the archive: the same SavedModel with no ``code/``."""
    from tfbatch.artifact import package

    target = Path(folder) / "model-noscript.tar.gz"
    if not target.exists():
        partial = target.with_name("partial-" + target.name)
        package([savedmodel_dir(folder)], partial, versions=[1])
        os.replace(partial, target)
    return target


def savedmodel_dir(folder: str | Path) -> Path:
    return Path(folder) / "savedmodel" / "1"


def archive_path(folder: str | Path) -> Path:
    return Path(folder) / "model.tar.gz"


def image_size_of(folder: str | Path) -> int:
    return int(json.loads((Path(folder) / "meta.json").read_text())["image_size"])


def tf_signature_size(savedmodel: str | Path) -> int:
    """The square input size of the saved ``serving_tensor`` signature."""
    import tensorflow as tf

    loaded = tf.saved_model.load(str(savedmodel))
    spec = loaded.signatures[SERVING_TENSOR].structured_input_signature[1]["images"]
    return int(spec.shape[1])
