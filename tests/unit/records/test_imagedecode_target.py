"""ImageTarget: what an image-tensor input asks of the decoder, read without TensorFlow."""

import pytest

from tfbatch.errors import InvalidInput
from tfbatch.records.imagedecode import ImageDecoder, ImageTarget
from tfbatch.runtime.signature import TensorInfo


def _info(dtype, shape):
    return TensorInfo(key="images", tensor_name="serving_default_images:0", dtype=dtype, shape=shape)


def test_keras_float_input_gives_a_fixed_scaled_target():
    target = ImageTarget.of(_info("float32", (None, 64, 64, 3)))
    assert target == ImageTarget(64, 64, 3, "float32")
    assert target.fixed and target.scaled


def test_uint8_input_without_a_batch_dim_or_channels_decodes_rgb_levels():
    target = ImageTarget.of(_info("uint8", (32, 48, None)))
    assert (target.height, target.width, target.channels) == (32, 48, 3)
    assert target.fixed and not target.scaled


def test_free_size_is_not_fixed():
    assert not ImageTarget.of(_info("float32", (None, None, None, 1))).fixed
    assert not ImageTarget(64, None).fixed


@pytest.mark.parametrize("dtype, shape, needle", [
    ("string", (None,), "needs a string input (encoded bytes) or an image tensor"),
    ("float32", (None, 3), "shape [-1, 3]"),
    ("float32", None, "shape [?]"),
    ("float32", (None, 8, 8, 2), "takes 2 channels; an image decodes into 1, 3 or 4"),
])
def test_inputs_that_are_not_image_tensors_are_named(dtype, shape, needle):
    with pytest.raises(InvalidInput, match="input 'images' of signature 'sig'") as err:
        ImageTarget.of(_info(dtype, shape), "sig")
    assert needle in str(err.value)


def test_bad_targets_are_refused():
    with pytest.raises(InvalidInput, match="5 channels"):
        ImageTarget(8, 8, 5)
    with pytest.raises(InvalidInput, match="height 0"):
        ImageTarget(0, 8)
    with pytest.raises(InvalidInput, match="numeric dtype, not bool"):
        ImageTarget(8, 8, 3, "bool")


def test_rejections_by_header_need_no_tensorflow():
    # Items refused by their header never reach TensorFlow: this batch holds nothing else,
    # so it runs in the unit tier (whose conftest fails any TensorFlow import).
    decoder = ImageDecoder(ImageTarget(8, 8), max_pixels=100)
    png_20x20 = b"\x89PNG\r\n\x1a\n" + b"\0\0\0\rIHDR" + (20).to_bytes(4, "big") * 2 + b"\x08\x02\0\0\0"
    result = decoder.decode([b"GIF89a\x01\x00\x01\x00", png_20x20, b""], ["a.gif", "big.png", "empty"])
    assert result.rows == [] and result.array.shape == (0, 8, 8, 3)
    assert "a.gif: GIF images are not accepted; expected JPEG or PNG" in str(result.errors[0])
    assert "big.png: PNG image of 20 x 20 = 400 pixels exceeds the pixel budget of 100" in str(result.errors[1])
    assert "empty: empty object" in str(result.errors[2])
