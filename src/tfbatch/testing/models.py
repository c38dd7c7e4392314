"""Tiny real SavedModels for tests across the project.

Each ``make_*`` function writes a SavedModel (``tf.saved_model.save`` of a ``tf.Module``
with ``tf.function`` signatures) to ``path`` and returns the path. Weights are fixed
functions of a seed so tests can compute expected numbers without TensorFlow
(see :func:`linear_expected`).

TensorFlow is imported inside the functions: importing this module stays cheap.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from tfbatch.runtime.signature import CLASSIFY_METHOD, REGRESS_METHOD


def _tf():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    return tf


def linear_weights(in_dim: int = 3, out_dim: int = 2, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The (W, b) that :func:`make_linear_model` bakes in, as float32 arrays."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((in_dim, out_dim)).astype(np.float32)
    b = rng.standard_normal((out_dim,)).astype(np.float32)
    return w, b


def linear_expected(x: np.ndarray, in_dim: int = 3, out_dim: int = 2, seed: int = 0) -> np.ndarray:
    """What the linear model returns for ``x`` (compare with a float tolerance)."""
    w, b = linear_weights(in_dim, out_dim, seed)
    return np.asarray(x, dtype=np.float32) @ w + b


def make_linear_model(path: str | Path, *, in_dim: int = 3, out_dim: int = 2, seed: int = 0) -> Path:
    """serving_default: ``x`` float32 [None, in_dim] -> ``y`` float32 [None, out_dim]."""
    tf = _tf()
    w, b = linear_weights(in_dim, out_dim, seed)

    class Linear(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable(w)
            self.b = tf.Variable(b)

        @tf.function(input_signature=[tf.TensorSpec([None, in_dim], tf.float32, name="x")])
        def serve(self, x):
            # Elementwise multiply-adds in a fixed order instead of tf.matmul: TensorFlow's CPU
            # matmul picks kernels by batch size, so a row's last float digit depends on which
            # rows share its batch. Tests that compare outputs byte for byte across engines,
            # resumes and batch strategies need a model whose rows do not depend on each other.
            y = self.b + x[:, 0:1] * self.w[0]
            for k in range(1, in_dim):
                y = y + x[:, k:k + 1] * self.w[k]
            return {"y": y}

    module = Linear()
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})
    return Path(path)


def make_multi_io_model(path: str | Path) -> Path:
    """Two inputs, two outputs, and a second signature ``scaled``.

    serving_default: ``a`` float32 [None, 2], ``b`` int64 [None] ->
    ``sum`` = a[:,0] + a[:,1] + b (float32 [None]), ``prod`` = a * b[:, None] (float32 [None, 2]).
    ``scaled``: same inputs -> ``scaled`` = a * 10 + b[:, None] (float32 [None, 2]).
    """
    tf = _tf()
    spec = [tf.TensorSpec([None, 2], tf.float32, name="a"), tf.TensorSpec([None], tf.int64, name="b")]

    class MultiIO(tf.Module):
        @tf.function(input_signature=spec)
        def serve(self, a, b):
            bf = tf.cast(b, tf.float32)
            return {"sum": tf.reduce_sum(a, axis=1) + bf, "prod": a * bf[:, None]}

        @tf.function(input_signature=spec)
        def scaled(self, a, b):
            return {"scaled": a * 10.0 + tf.cast(b, tf.float32)[:, None]}

    module = MultiIO()
    tf.saved_model.save(
        module, str(path), signatures={"serving_default": module.serve, "scaled": module.scaled}
    )
    return Path(path)


def image_weights(size: int, channels: int, classes: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1234)
    w = rng.standard_normal((size * size * channels, classes)).astype(np.float32)
    b = rng.standard_normal((classes,)).astype(np.float32) * 0.1
    return w, b


def make_image_bytes_model(path: str | Path, *, size: int = 8, channels: int = 1, classes: int = 10,
                           delay_s: float = 0.0) -> Path:
    """An image classifier over encoded bytes (PNG/JPEG/GIF/BMP), any input image size.

    serving_default: ``image_bytes`` string [None] -> ``probabilities`` float32 [None, classes],
    ``classes`` int64 [None]. serving_tensor: ``images`` float32 [None, size, size, channels]
    (already scaled to [0, 1]) -> the same outputs. ``delay_s``: serving_default first sleeps
    that long once per batch (as ``make_slow_model``), so a job is still running when a test
    interferes with it; the outputs are the same.
    """
    tf = _tf()
    from tensorflow.python.data.experimental.ops import testing as data_testing
    w, b = image_weights(size, channels, classes)

    class ImageModel(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable(w)
            self.b = tf.Variable(b)

        def _head(self, images):
            flat = tf.reshape(images, [-1, size * size * channels])
            probs = tf.nn.softmax(tf.matmul(flat, self.w) + self.b)
            return {"probabilities": probs, "classes": tf.argmax(probs, axis=1, output_type=tf.int64)}

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="image_bytes")])
        def serve_bytes(self, image_bytes):
            def decode(data):
                img = tf.io.decode_image(data, channels=channels, expand_animations=False)
                img = tf.image.resize(tf.cast(img, tf.float32) / 255.0, [size, size])
                return tf.ensure_shape(img, [size, size, channels])

            if delay_s > 0:
                sleep = data_testing.sleep(int(delay_s * 1_000_000))
                image_bytes = tf.data.Dataset.from_tensors(image_bytes).apply(sleep).get_single_element()
            images = tf.map_fn(
                decode, image_bytes, fn_output_signature=tf.TensorSpec([size, size, channels], tf.float32)
            )
            return self._head(images)

        @tf.function(input_signature=[tf.TensorSpec([None, size, size, channels], tf.float32, name="images")])
        def serve_tensor(self, images):
            return self._head(images)

    module = ImageModel()
    tf.saved_model.save(
        module,
        str(path),
        signatures={"serving_default": module.serve_bytes, "serving_tensor": module.serve_tensor},
    )
    return Path(path)


def set_method_names(path: str | Path, method_names: dict[str, str]) -> None:
    """Rewrite SignatureDef.method_name in ``path``/saved_model.pb.

    TF2's ``tf.saved_model.save`` always writes ``tensorflow/serving/predict``; TF Serving
    (and :class:`tfbatch.runtime.Servable`) read the method name from the SignatureDef in
    the MetaGraphDef, while ``tf.saved_model.load`` rebuilds functions from the object
    graph and ignores it. Editing the proto is therefore both sufficient and harmless.
    """
    from tensorflow.core.protobuf import saved_model_pb2

    pb = Path(path) / "saved_model.pb"
    saved = saved_model_pb2.SavedModel()
    saved.ParseFromString(pb.read_bytes())
    for meta in saved.meta_graphs:
        for name, method in method_names.items():
            if name in meta.signature_def:
                meta.signature_def[name].method_name = method
    pb.write_bytes(saved.SerializeToString())


CLASSIFY_LABELS = ("negative", "positive")


def make_classify_regress_model(path: str | Path) -> Path:
    """Signatures over serialized tf.train.Example, as TF Serving's classify/regress expect.

    Each Example has features ``x`` (float, 2 values) and optional ``w`` (float, 1 value,
    default 1.0). Let s = w * (x[0] + x[1]).
    - ``classify`` (method tensorflow/serving/classify): ``inputs`` string [None] ->
      ``classes`` string [None, 2] = ["negative", "positive"], ``scores`` float [None, 2]
      = [sigmoid(-s), sigmoid(s)].
    - ``regress`` (method tensorflow/serving/regress): ``inputs`` -> ``outputs`` float [None] = s.
    - ``serving_default`` (predict): ``x`` float32 [None, 2] -> ``score`` float32 [None]
      = x[:,0] + x[:,1].
    """
    tf = _tf()
    features = {
        "x": tf.io.FixedLenFeature([2], tf.float32),
        "w": tf.io.FixedLenFeature([1], tf.float32, default_value=[1.0]),
    }

    def score(serialized):
        parsed = tf.io.parse_example(serialized, features)
        return parsed["w"][:, 0] * tf.reduce_sum(parsed["x"], axis=1)

    examples_spec = [tf.TensorSpec([None], tf.string, name="inputs")]

    class ClassifyRegress(tf.Module):
        @tf.function(input_signature=examples_spec)
        def classify(self, inputs):
            s = score(inputs)
            scores = tf.stack([tf.sigmoid(-s), tf.sigmoid(s)], axis=1)
            labels = tf.tile(tf.constant([list(CLASSIFY_LABELS)]), [tf.shape(s)[0], 1])
            return {"classes": labels, "scores": scores}

        @tf.function(input_signature=examples_spec)
        def regress(self, inputs):
            return {"outputs": score(inputs)}

        @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32, name="x")])
        def predict(self, x):
            return {"score": tf.reduce_sum(x, axis=1)}

    module = ClassifyRegress()
    tf.saved_model.save(
        module,
        str(path),
        signatures={
            "serving_default": module.predict,
            "classify": module.classify,
            "regress": module.regress,
        },
    )
    set_method_names(path, {"classify": CLASSIFY_METHOD, "regress": REGRESS_METHOD})
    return Path(path)


def make_slow_model(path: str | Path, delay_s: float) -> Path:
    """serving_default: ``x`` float32 [None, 2] -> ``y`` = x * 2, after sleeping ``delay_s``.

    The sleep is a tf.data sleep (a real sleep, no busy loop, serializable in the graph),
    once per batch, whatever its size.
    """
    tf = _tf()
    from tensorflow.python.data.experimental.ops import testing as data_testing

    micros = int(delay_s * 1_000_000)

    class Slow(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32, name="x")])
        def serve(self, x):
            ds = tf.data.Dataset.from_tensors(x).apply(data_testing.sleep(micros))
            return {"y": ds.get_single_element() * 2.0}

    module = Slow()
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})
    return Path(path)


def make_failing_model(path: str | Path) -> Path:
    """serving_default: ``x`` float32 [None, 2] -> ``y`` = x + 1, failing for negative values.

    A negative value raises tf.errors.InvalidArgumentError at run time, with a message
    containing "negative input".
    """
    tf = _tf()

    class Failing(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32, name="x")])
        def serve(self, x):
            check = tf.debugging.assert_non_negative(x, message="negative input")
            with tf.control_dependencies([check]):
                return {"y": tf.identity(x + 1.0)}

    module = Failing()
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})
    return Path(path)


def make_keras_image_model(path: str | Path, *, size: int | None = 64, channels: int = 3, classes: int = 5,
                           seed: int = 7) -> Path:
    """The most common Keras export: ``tf.saved_model.save(keras_model)`` of a small CNN.

    serving_default: ``inputs`` float32 [None, size, size, channels] (pixels in [0, 1]) ->
    ``output_0`` float32 [None, classes] (softmax); ``size=None``: fully convolutional,
    [None, None, None, channels], each image at its own size. Weights are fixed by ``seed``;
    tests get expected outputs by running the saved model on a reference decode.
    """
    tf = _tf()
    import keras

    keras.utils.set_random_seed(seed)
    inputs = keras.Input(shape=(size, size, channels))
    x = keras.layers.Conv2D(8, 3, strides=2, activation="relu")(inputs)
    x = keras.layers.GlobalAveragePooling2D()(x)
    model = keras.Model(inputs, keras.layers.Dense(classes, activation="softmax")(x))
    tf.saved_model.save(model, str(path))
    return Path(path)


def make_bfloat16_model(path: str | Path) -> Path:
    """A signature in bfloat16, as a model kept in bfloat16 throughout exports it.

    serving_default: ``x`` bfloat16 [None, 3] -> ``doubled`` bfloat16 [None, 3] (2x, exact in
    bfloat16) and ``total`` float32 [None] (the row's sum, computed in float32).
    """
    tf = _tf()

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.bfloat16, name="x")])
    def serve(x):
        return {"doubled": x * tf.constant(2, tf.bfloat16), "total": tf.reduce_sum(tf.cast(x, tf.float32), axis=1)}

    module = tf.Module()
    module.serve = serve
    tf.saved_model.save(module, str(path), signatures={"serving_default": serve})
    return Path(path)


def make_detection_model(path: str | Path, *, boxes: int = 4, seed: int = 5) -> Path:
    """The shape of an object-detection export: a batch of one uint8 image of any size.

    serving_default: ``input_tensor`` uint8 [1, None, None, 3] -> ``detection_scores``
    float32 [1, boxes], ``detection_boxes`` float32 [1, boxes, 4], ``num_detections``
    float32 [1] (from the image's mean colour; fixed weights by ``seed``).
    """
    tf = _tf()

    module = tf.Module()
    module.w = tf.Variable(tf.random.stateless_normal([3, boxes], seed=[seed, 0]))

    @tf.function(input_signature=[tf.TensorSpec([1, None, None, 3], tf.uint8, name="input_tensor")])
    def serve(images):
        mean = tf.reduce_mean(tf.cast(images, tf.float32), axis=[1, 2]) / 255.0
        scores = tf.sigmoid(mean @ module.w)
        corners = tf.stack([scores * 0.5, scores * 0.25, scores * 0.5 + 0.5, scores * 0.25 + 0.75], axis=-1)
        return {"detection_scores": scores, "detection_boxes": corners,
                "num_detections": tf.fill([1], float(boxes))}

    module.serve = serve
    tf.saved_model.save(module, str(path), signatures={"serving_default": serve})
    return Path(path)


def scripted_archive(versions: list[str | Path], script: str, folder: str | Path) -> Path:
    """``folder/model.tar.gz``: the SavedModel ``versions`` with ``script`` (dedented) as
    ``code/inference.py``, the layout SageMaker's TensorFlow container reads."""
    import textwrap

    from tfbatch.artifact import package

    folder = Path(folder)
    (folder / "code").mkdir(parents=True, exist_ok=True)
    (folder / "code" / "inference.py").write_text(textwrap.dedent(script))
    return package(list(versions), folder / "model.tar.gz", code_dir=folder / "code")
