"""The chunked JSON encoding writes exactly the bytes of the single ``jsonenc.dumps``."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tfbatch.runtime import jsonenc
from tfbatch.tfs import jsonstream
from tfbatch.tfs.codec import COLUMNAR, ROW, encode_predict

RNG = np.random.default_rng(7)


def outputs_of(dtype, shape) -> np.ndarray:
    values = RNG.standard_normal(shape) * 1000
    if np.dtype(dtype).kind == "b":
        return values > 0
    return values.astype(dtype)


def joined(value, chunk_values) -> bytes:
    plan = jsonstream.plan(value, chunk_values)
    assert plan is not None, "expected a streamed plan"
    chunks = list(plan)
    assert len(chunks) > 1
    return b"".join(chunks)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int8, np.int32, np.int64, np.uint8,
                                   np.uint64, np.bool_])
# (400, 2, 3): rows of depth 2, so later slices are cut out of orjson's own text after "]],"
@pytest.mark.parametrize("shape", [(1, 5000), (700, 3), (3, 4, 250), (2, 1, 3, 400), (4001,), (400, 2, 3)])
@pytest.mark.parametrize("fmt", [ROW, COLUMNAR])
def test_chunks_join_to_the_single_encode(dtype, shape, fmt):
    value = encode_predict({"y": outputs_of(dtype, shape)}, fmt, native=True)
    for chunk_values in (1, 7, 100, 999):
        assert joined(value, chunk_values) == jsonenc.dumps(value)


def test_several_outputs_with_scalars_empties_strings_and_non_finite_values():
    outputs = {
        "big": outputs_of(np.float32, (3, 500)),
        "ints": np.arange(3 * 400, dtype=np.int64).reshape(3, 400) * (2**40),
        "empty": np.zeros((3, 0), np.float32),
        "names_bytes": np.array([b"\xff\x00", b"a", b"b"], dtype=object),
        "label": np.array(["x", "y", "\u00e9"], dtype=object),
        "nan": np.array([[np.nan, 1.5], [np.inf, -np.inf], [0.1, 2.0]], np.float32),
    }
    for fmt in (ROW, COLUMNAR):
        value = encode_predict(outputs, fmt, native=True)
        text = jsonenc.dumps(value)
        assert joined(value, 50) == text
        assert b"NaN" in text and b"-Infinity" in text  # TF Serving's tokens, as before
    columnar = encode_predict({"big": outputs_of(np.float32, (2, 600)), "zero_d": np.float32(2.5),
                               "zero_d_nan": np.array(np.nan, np.float32)}, COLUMNAR, native=True)
    assert joined(columnar, 64) == jsonenc.dumps(columnar)
    assert b'"zero_d":2.5,"zero_d_nan":NaN}' in jsonenc.dumps(columnar)  # not orjson's null
    rows = json.loads(jsonenc.dumps(encode_predict(outputs, ROW, native=True)))["predictions"]
    assert [r["label"] for r in rows] == ["x", "y", "\u00e9"] and np.isinf(rows[1]["nan"][1])


def test_large_non_finite_array_stays_one_fragment():
    big = outputs_of(np.float32, (2, 3000))
    big[1, 7] = np.nan
    value = encode_predict({"y": big}, ROW, native=True)
    # The fragment path writes float64 digits for every value; it is not cut, so it is not streamed.
    assert jsonstream.plan(value, 100) is None
    assert json.loads(jsonenc.dumps(value).replace(b"NaN", b"null"))["predictions"][1][7] is None


def test_small_answers_and_what_orjson_cannot_write_are_not_planned():
    assert jsonstream.plan(encode_predict({"y": outputs_of(np.float32, (2, 3))}, ROW, native=True)) is None
    assert jsonstream.plan({"predictions": [[1.0]]}, 1) is None
    huge_int = {"a": np.arange(50, dtype=np.int32), "b": 2**70}  # dumps falls back to the standard library
    assert jsonstream.plan(huge_int, 10) is None
    assert json.loads(jsonenc.dumps(huge_int))["b"] == 2**70
    assert jsonstream.plan({1: np.arange(50, dtype=np.int32)}, 10) is None  # non-str key


def test_chunks_are_bounded_by_the_chunk_size():
    value = encode_predict({"y": outputs_of(np.float32, (1, 200_000))}, ROW, native=True)
    plan = jsonstream.plan(value, 10_000)
    sizes = [len(c) for c in plan]
    # Float32 text is at most ~16 bytes a value: no chunk holds the whole array.
    assert max(sizes) < 10_000 * 17 and sum(sizes) == len(jsonenc.dumps(value))
