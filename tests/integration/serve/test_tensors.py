"""TensorProto conversion agrees with TensorFlow's own make_tensor_proto / make_ndarray."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tfbatch.errors import InvalidInput
from tfbatch.tfs.tensors import dtype_enum, from_ndarray, to_ndarray

ARRAYS = [
    np.arange(12, dtype=np.float32).reshape(3, 4) / 7,
    np.arange(6, dtype=np.float64).reshape(2, 3),
    np.arange(-3, 3, dtype=np.int32),
    np.arange(24, dtype=np.uint8).reshape(2, 3, 4),
    np.array([1, -(2**40)], dtype=np.int64),
    np.array([[True, False]]),
    np.array([1.5, -2.25], dtype=np.float16),
    np.zeros((0, 3), dtype=np.float32),
]


@pytest.mark.parametrize("array", ARRAYS, ids=lambda a: f"{a.dtype}{list(a.shape)}")
def test_numbers_round_trip_both_ways(array):
    np.testing.assert_array_equal(tf.make_ndarray(from_ndarray(array)), array)
    decoded = to_ndarray(tf.make_tensor_proto(array), "x")
    assert decoded.dtype == array.dtype and decoded.shape == array.shape
    np.testing.assert_array_equal(decoded, array)


def test_value_lists_and_broadcast_as_tensorflow_does():
    proto = tf.make_tensor_proto([1.0, 2.0, 3.0], dtype=tf.float32)
    proto.ClearField("tensor_content")
    proto.float_val.extend([1.0, 2.0, 3.0])
    np.testing.assert_array_equal(to_ndarray(proto), np.array([1, 2, 3], np.float32))
    filled = tf.make_tensor_proto(7, dtype=tf.int64, shape=[2, 2])
    np.testing.assert_array_equal(to_ndarray(filled), tf.make_ndarray(filled))


def test_strings():
    array = np.array([[b"a", b"\xff\x00"], [b"", b"xyz"]], dtype=object)
    np.testing.assert_array_equal(tf.make_ndarray(from_ndarray(array)), array)
    decoded = to_ndarray(tf.make_tensor_proto(array), "s")
    assert decoded.dtype == object and decoded.tolist() == array.tolist()


def test_short_content_names_the_input():
    proto = tf.make_tensor_proto(np.zeros((2, 2), np.float32))
    proto.tensor_content = proto.tensor_content[:-4]
    with pytest.raises(InvalidInput, match="input 'img'.*12 bytes.*needs 16"):
        to_ndarray(proto, "img")


def test_dtype_enum():
    assert dtype_enum("float32") == tf.float32.as_datatype_enum
    assert dtype_enum("string") == tf.string.as_datatype_enum
    assert dtype_enum("bfloat16") == tf.bfloat16.as_datatype_enum


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.uint8, np.int64, np.bool_])
def test_outputs_use_typed_value_lists_like_tf_serving(dtype):
    """Seed 003 reads ``outputs['predictions'].float_val`` directly: that field must be filled."""
    array = (np.arange(6).reshape(2, 3) % 3).astype(dtype)
    proto = from_ndarray(array)
    assert proto.tensor_content == b""
    field = {np.float32: "float_val", np.float64: "double_val", np.int64: "int64_val",
             np.bool_: "bool_val"}.get(dtype, "int_val")
    np.testing.assert_array_equal(np.array(getattr(proto, field)).reshape(2, 3), array)
    np.testing.assert_array_equal(tf.make_ndarray(proto), array)
    np.testing.assert_array_equal(tf.make_ndarray(from_ndarray(array, tensor_content=True)), array)
