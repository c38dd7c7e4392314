from __future__ import annotations

import io
import json

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from tfbatch.errors import InvalidInput
from tfbatch.train.export import export_servable


def _jpeg_bytes(image: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="JPEG", quality=95)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def exported(tmp_path_factory, tiny_rgb_model):
    out = tmp_path_factory.mktemp("export")
    path = export_servable(
        tiny_rgb_model, out, version=3, image_size=(16, 16), channels=3, class_names=list("abcd")
    )
    return path, tf.saved_model.load(str(path))


def test_layout_and_signatures(exported):
    path, loaded = exported
    assert path.name == "3" and (path / "saved_model.pb").is_file()
    assert json.loads((path / "assets.extra" / "class_names.json").read_text()) == list("abcd")
    default = loaded.signatures["serving_default"]
    _, inputs = default.structured_input_signature
    assert set(inputs) == {"image_bytes"} and inputs["image_bytes"].dtype == tf.string
    outputs = default.structured_outputs
    assert outputs["probabilities"].dtype == tf.float32
    assert outputs["probabilities"].shape.as_list() == [None, 4]
    assert outputs["classes"].dtype == tf.int64
    _, tensor_inputs = loaded.signatures["serving_tensor"].structured_input_signature
    assert tensor_inputs["images"].shape.as_list() == [None, 16, 16, 3]


def test_png_bytes_match_keras_predictions(exported, tiny_rgb_model, encode_png):
    _, loaded = exported
    images = np.random.RandomState(0).randint(0, 256, (5, 16, 16, 3), dtype=np.uint8)
    out = loaded.signatures["serving_default"](
        image_bytes=tf.constant([encode_png(im) for im in images])
    )
    expected = tiny_rgb_model.predict(images / 255.0, verbose=0)
    np.testing.assert_allclose(out["probabilities"].numpy(), expected, atol=1e-6)
    np.testing.assert_array_equal(out["classes"].numpy(), expected.argmax(axis=1))
    tensor_out = loaded.signatures["serving_tensor"](images=tf.constant(images / 255.0, tf.float32))
    np.testing.assert_allclose(tensor_out["probabilities"].numpy(), expected, atol=1e-6)


def test_mixed_sizes_formats_and_channels_in_one_batch(exported, tiny_rgb_model, encode_png):
    _, loaded = exported
    rng = np.random.RandomState(1)
    base = rng.randint(0, 256, (16, 16, 3), dtype=np.uint8)
    upscaled = base.repeat(4, axis=0).repeat(4, axis=1)  # 64x64: resized back in-graph
    gray = rng.randint(0, 256, (16, 16), dtype=np.uint8)  # 1 channel -> decoded as RGB
    jpeg = rng.randint(0, 256, (40, 24, 3), dtype=np.uint8)
    batch = [encode_png(base), encode_png(upscaled), encode_png(gray), _jpeg_bytes(jpeg)]
    out = loaded.signatures["serving_default"](image_bytes=tf.constant(batch))
    probs = out["probabilities"].numpy()
    assert probs.shape == (4, 4)
    np.testing.assert_allclose(probs[1], probs[0], atol=1e-6)
    gray_rgb = np.repeat(gray[..., None], 3, axis=-1)
    expected_gray = tiny_rgb_model.predict(gray_rgb[None] / 255.0, verbose=0)[0]
    np.testing.assert_allclose(probs[2], expected_gray, atol=1e-6)


def test_garbage_bytes_fail_loudly(exported):
    _, loaded = exported
    with pytest.raises(tf.errors.InvalidArgumentError):
        loaded.signatures["serving_default"](image_bytes=tf.constant([b"not an image"]))


def test_probabilities_only_and_refusing_to_overwrite(tmp_path, tiny_rgb_model):
    path = export_servable(
        tiny_rgb_model, tmp_path, image_size=(16, 16), channels=3, include_classes=False
    )
    loaded = tf.saved_model.load(str(path))
    assert set(loaded.signatures["serving_default"].structured_outputs) == {"probabilities"}
    with pytest.raises(InvalidInput, match="already exists"):
        export_servable(tiny_rgb_model, tmp_path, image_size=(16, 16), channels=3)
