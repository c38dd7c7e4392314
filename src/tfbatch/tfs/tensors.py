"""TensorProto <-> numpy without TensorFlow's Python helpers on the hot path.

``tf.make_tensor_proto`` / ``tf.make_ndarray`` go element by element for several dtypes;
for the dtypes images and model outputs use (float, ints, bool, strings) a TensorProto is
just ``tensor_content`` bytes plus a shape, so we build and read it directly. Anything
rarer (half precision in ``half_val``, complex, bfloat16, resources) falls back to TF.
"""

from __future__ import annotations

import math

import numpy as np
from tensorflow.core.framework import tensor_pb2, tensor_shape_pb2, types_pb2

from tfbatch.errors import InvalidInput

_NUMPY_BY_DT: dict[int, np.dtype] = {
    types_pb2.DT_FLOAT: np.dtype(np.float32),
    types_pb2.DT_DOUBLE: np.dtype(np.float64),
    types_pb2.DT_INT32: np.dtype(np.int32),
    types_pb2.DT_UINT8: np.dtype(np.uint8),
    types_pb2.DT_INT16: np.dtype(np.int16),
    types_pb2.DT_INT8: np.dtype(np.int8),
    types_pb2.DT_INT64: np.dtype(np.int64),
    types_pb2.DT_BOOL: np.dtype(np.bool_),
    types_pb2.DT_UINT16: np.dtype(np.uint16),
    types_pb2.DT_UINT32: np.dtype(np.uint32),
    types_pb2.DT_UINT64: np.dtype(np.uint64),
    types_pb2.DT_HALF: np.dtype(np.float16),
}
_DT_BY_NUMPY = {v: k for k, v in _NUMPY_BY_DT.items()}

# Which repeated field holds the values when tensor_content is empty.
_VAL_FIELD = {
    types_pb2.DT_FLOAT: "float_val",
    types_pb2.DT_DOUBLE: "double_val",
    types_pb2.DT_INT32: "int_val",
    types_pb2.DT_UINT8: "int_val",
    types_pb2.DT_INT16: "int_val",
    types_pb2.DT_INT8: "int_val",
    types_pb2.DT_INT64: "int64_val",
    types_pb2.DT_BOOL: "bool_val",
    types_pb2.DT_UINT16: "int_val",
    types_pb2.DT_UINT32: "uint32_val",
    types_pb2.DT_UINT64: "uint64_val",
}


# Bytes per element of the dtypes that go through TensorFlow's own decoder; anything not listed
# is charged 16 bytes (the widest, complex128) so the budget errs on the side of refusing.
_FALLBACK_ITEMSIZE = {types_pb2.DT_BFLOAT16: 2, types_pb2.DT_COMPLEX64: 8, types_pb2.DT_COMPLEX128: 16}
# A string tensor costs one object pointer per element even when every element is one shared value.
_STRING_ITEMSIZE = 8


def _shape(proto: tensor_pb2.TensorProto, key: str) -> tuple[int, ...]:
    if proto.tensor_shape.unknown_rank:
        raise InvalidInput(f"input '{key}': a request tensor must have a known shape")
    shape = tuple(d.size for d in proto.tensor_shape.dim)
    if any(size < 0 for size in shape):
        raise InvalidInput(f"input '{key}': shape {list(shape)} has a negative dimension")
    return shape


def _itemsize(dt: int) -> int:
    if dt == types_pb2.DT_STRING:
        return _STRING_ITEMSIZE
    dtype = _NUMPY_BY_DT.get(dt)
    return dtype.itemsize if dtype is not None else _FALLBACK_ITEMSIZE.get(dt, 16)


def decoded_nbytes(proto: tensor_pb2.TensorProto, key: str = "") -> int:
    """What decoding ``proto`` will allocate, from its header alone (no element is touched).

    A TensorProto's wire size says nothing about its decoded size: a shape plus one value
    fills the whole tensor, so 22 bytes can ask for a GiB. Callers compare this to their
    budget before :func:`to_ndarray` allocates anything.
    """
    shape = _shape(proto, key)
    # math.prod on Python ints: np.prod in int64 wraps around and can make a huge shape look small.
    return math.prod(shape) * _itemsize(proto.dtype)


def check_budget(protos, max_bytes: int | None) -> None:
    """Refuse a request whose tensors would decode to more than ``max_bytes`` in total."""
    if max_bytes is None:
        return
    total = 0
    for key, proto in protos:
        need = decoded_nbytes(proto, key)
        total += need
        if total > max_bytes:
            shape = [d.size for d in proto.tensor_shape.dim]
            raise InvalidInput(
                f"input '{key}': shape {shape} would decode to {need} bytes, which takes the request's "
                f"tensors to {total} bytes, over the limit of {max_bytes} bytes "
                f"({max_bytes / 2**20:g} MiB; raise it with --max-request-mb)"
            )


def to_ndarray(proto: tensor_pb2.TensorProto, key: str = "", *, max_bytes: int | None = None) -> np.ndarray:
    """A TensorProto as a numpy array (strings as an object array of bytes).

    ``max_bytes`` bounds the decoded size; it is checked before anything is allocated.
    """
    check_budget([(key, proto)], max_bytes)
    shape = _shape(proto, key)
    count = math.prod(shape)
    try:
        if proto.dtype == types_pb2.DT_STRING:
            values = list(proto.string_val)
            if len(values) == count:
                return np.array(values, dtype=object).reshape(shape)
            if len(values) == 1:  # TF's convention: one value fills the tensor
                return np.full(shape, values[0], dtype=object)
            raise InvalidInput(
                f"input '{key}': string tensor of shape {list(shape)} needs {count} values, got {len(values)}"
            )
        dtype = _NUMPY_BY_DT.get(proto.dtype)
        if dtype is None or (proto.dtype == types_pb2.DT_HALF and not proto.tensor_content):
            return _tf_fallback(proto, key)
        if proto.tensor_content:
            if len(proto.tensor_content) != count * dtype.itemsize:
                raise InvalidInput(
                    f"input '{key}': tensor_content has {len(proto.tensor_content)} bytes, shape "
                    f"{list(shape)} of {dtype.name} needs {count * dtype.itemsize}"
                )
            # copy(): frombuffer over the proto's bytes is read-only, and TF may want to write.
            return np.frombuffer(proto.tensor_content, dtype=dtype).reshape(shape).copy()
        values = np.asarray(getattr(proto, _VAL_FIELD[proto.dtype]), dtype=dtype)
        if values.size == count:
            return values.reshape(shape)
        if values.size == 1 or (values.size == 0 and count == 0):
            return np.full(shape, values[0] if values.size else 0, dtype=dtype)
        if values.size < count and values.size > 0:
            # TF pads a short value list with its last element.
            padded = np.empty(count, dtype=dtype)
            padded[: values.size] = values
            padded[values.size:] = values[-1]
            return padded.reshape(shape)
        raise InvalidInput(
            f"input '{key}': tensor of shape {list(shape)} needs {count} values, got {values.size}"
        )
    except InvalidInput:
        raise
    except (ValueError, TypeError) as exc:
        raise InvalidInput(f"input '{key}': cannot decode TensorProto: {exc}") from exc


def _tf_fallback(proto: tensor_pb2.TensorProto, key: str) -> np.ndarray:
    import tensorflow as tf

    try:
        return tf.make_ndarray(proto)
    except Exception as exc:
        name = types_pb2.DataType.Name(proto.dtype) if proto.dtype in types_pb2.DataType.values() else proto.dtype
        raise InvalidInput(f"input '{key}': unsupported TensorProto dtype {name}: {exc}") from exc


# Field numbers of TensorProto's packed fixed-width value lists: their wire bytes are the raw
# little-endian array, so they can be written without a Python loop over elements.
_FIXED_FIELDS = {np.dtype(np.float32): 5, np.dtype(np.float64): 6}
_VARINT_FIELDS = {
    np.dtype(np.int32): "int_val", np.dtype(np.int16): "int_val", np.dtype(np.int8): "int_val",
    np.dtype(np.uint8): "int_val", np.dtype(np.uint16): "int_val", np.dtype(np.int64): "int64_val",
    np.dtype(np.bool_): "bool_val", np.dtype(np.uint32): "uint32_val", np.dtype(np.uint64): "uint64_val",
}


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def from_ndarray(array: np.ndarray, *, tensor_content: bool = False) -> tensor_pb2.TensorProto:
    """A numpy array as a TensorProto.

    By default numbers go in the typed value lists (``float_val``, ``int64_val``, ...), as TF
    Serving's Predict answers: handler scripts in the wild read ``outputs[k].float_val``
    directly. ``tensor_content=True`` gives the compact raw-bytes form instead.
    """
    array = np.asarray(array)
    proto = tensor_pb2.TensorProto()
    proto.tensor_shape.CopyFrom(shape_proto(array.shape))
    if array.dtype.kind in ("O", "S", "U"):
        proto.dtype = types_pb2.DT_STRING
        proto.string_val.extend(_as_bytes(v) for v in array.reshape(-1))
        return proto
    native = array.dtype.newbyteorder("=") if array.dtype.byteorder == ">" else array.dtype
    dt = _DT_BY_NUMPY.get(native)
    if dt is None:
        import tensorflow as tf

        return tf.make_tensor_proto(array)
    proto.dtype = dt
    little = np.ascontiguousarray(array, dtype=native.newbyteorder("<"))
    if tensor_content or native not in _FIXED_FIELDS and native not in _VARINT_FIELDS:
        proto.tensor_content = little.tobytes()
    elif array.size and native in _FIXED_FIELDS:
        raw = little.tobytes()
        proto.MergeFromString(_varint((_FIXED_FIELDS[native] << 3) | 2) + _varint(len(raw)) + raw)
    elif array.size:
        getattr(proto, _VARINT_FIELDS[native]).extend(array.reshape(-1).tolist())
    return proto


def shape_proto(shape: tuple[int | None, ...] | None) -> tensor_shape_pb2.TensorShapeProto:
    proto = tensor_shape_pb2.TensorShapeProto()
    if shape is None:
        proto.unknown_rank = True
        return proto
    for size in shape:
        proto.dim.add(size=-1 if size is None else int(size))
    return proto


def dtype_enum(name: str) -> int:
    """``"float32"`` / ``"string"`` -> the DataType enum value."""
    if name == "string":
        return types_pb2.DT_STRING
    try:
        dt = _DT_BY_NUMPY.get(np.dtype(name))
    except TypeError:  # bfloat16, resource, variant: numpy has no such dtype
        dt = None
    if dt is not None:
        return dt
    import tensorflow as tf

    return tf.as_dtype(name).as_datatype_enum


def _as_bytes(value) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    return str(value).encode("utf-8")
