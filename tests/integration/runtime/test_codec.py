"""TFS REST JSON codec against hand-written signatures (no model needed)."""

from __future__ import annotations

import base64
import json
import math
import sys

import numpy as np
import pytest

from tfbatch import errors
from tfbatch.runtime import SignatureInfo, TensorInfo
from tfbatch.tfs.codec import decode_predict, encode_predict
from tfbatch.tfs import codec
from tfbatch.tfs import examples


def sig(**inputs: tuple[str, tuple | None]) -> SignatureInfo:
    return SignatureInfo(
        name="serving_default",
        method_name="tensorflow/serving/predict",
        inputs={k: TensorInfo(k, f"{k}:0", dt, shape) for k, (dt, shape) in inputs.items()},
        outputs={},
    )


X3 = sig(x=("float32", (None, 3)))
IMG = sig(image_bytes=("string", (None,)))
MULTI = sig(a=("float32", (None, 2)), b=("int64", (None,)))


def test_row_plain_list_single_input():
    tensors, fmt = decode_predict({"instances": [[1, 2, 3], [4.5, 5, 6]]}, X3)
    assert fmt == "row"
    assert tensors["x"].dtype == np.float32 and tensors["x"].tolist() == [[1, 2, 3], [4.5, 5, 6]]


def test_row_objects_multiple_inputs():
    body = {"instances": [{"a": [1, 2], "b": 3}, {"a": [3, 4], "b": 5}]}
    tensors, fmt = decode_predict(body, MULTI)
    assert fmt == "row"
    assert tensors["a"].dtype == np.float32 and tensors["a"].shape == (2, 2)
    assert tensors["b"].dtype == np.int64 and tensors["b"].tolist() == [3, 5]


def test_columnar_single_and_named():
    t, fmt = decode_predict({"inputs": [[1, 2, 3]]}, X3)
    assert fmt == "columnar" and t["x"].shape == (1, 3)
    t, fmt = decode_predict({"inputs": {"a": [[1, 2]], "b": [7]}}, MULTI)
    assert fmt == "columnar" and t["b"].tolist() == [7]


def test_b64_into_string_tensor_also_nested():
    data = b"\x89PNG\x00\xff"
    enc = base64.b64encode(data).decode()
    t, _ = decode_predict({"instances": [{"b64": enc}, "plain text"]}, IMG)
    assert t["image_bytes"].dtype == object
    assert t["image_bytes"].tolist() == [data, b"plain text"]
    nested = sig(s=("string", (None, 2)))
    t, _ = decode_predict({"inputs": [[{"b64": enc}, {"b64": enc}]]}, nested)
    assert t["s"].shape == (1, 2) and t["s"][0, 1] == data
    # a single b64 object as a named instance input
    t, _ = decode_predict({"instances": [{"image_bytes": {"b64": enc}}]}, IMG)
    assert t["image_bytes"].tolist() == [data]


def test_b64_into_numeric_tensor_is_invalid():
    with pytest.raises(errors.InvalidInput, match=r"input 'x' has dtype float32, but received \{\"b64\""):
        decode_predict({"instances": [[{"b64": "AAAA"}, 1, 2]]}, X3)


def test_bad_base64_is_invalid():
    with pytest.raises(errors.InvalidInput, match="not valid base64"):
        decode_predict({"instances": [{"b64": "!!!"}]}, IMG)


def test_ragged_instances_name_the_instance():
    with pytest.raises(errors.InvalidInput, match=r"instance 2 of input 'x' has shape \[2\], but instance 0 has shape \[3\]"):
        decode_predict({"instances": [[1, 2, 3], [4, 5, 6], [7, 8]]}, X3)
    with pytest.raises(errors.InvalidInput, match=r"instance 1 of input 'image_bytes'"):
        decode_predict({"instances": ["a", ["b"]]}, IMG)


def test_instance_keys_must_match_signature():
    with pytest.raises(errors.InvalidInput, match=r"instance 1: keys \['a'\] must be equal to the inputs of signature 'serving_default': \['a', 'b'\]"):
        decode_predict({"instances": [{"a": [1, 2], "b": 1}, {"a": [1, 2]}]}, MULTI)


def test_plain_list_for_multi_input_signature_is_invalid():
    with pytest.raises(errors.InvalidInput, match="has several inputs"):
        decode_predict({"instances": [[1, 2]]}, MULTI)


def test_columnar_missing_and_unknown_inputs():
    with pytest.raises(errors.InvalidInput, match=r"missing \['b'\]; unknown \['c'\]"):
        decode_predict({"inputs": {"a": [[1, 2]], "c": 1}}, MULTI)


def test_dtype_errors_are_precise():
    with pytest.raises(errors.InvalidInput, match=r"input 'b' of signature 'serving_default': expected dtype int64 with shape \[-1\], got float64 with shape \[1\]"):
        decode_predict({"instances": [{"a": [1, 2], "b": 1.5}]}, MULTI)
    with pytest.raises(errors.InvalidInput, match=r"expected dtype float32 with shape \[-1, 3\], got string"):
        decode_predict({"instances": [["a", "b", "c"]]}, X3)
    with pytest.raises(errors.InvalidInput, match=r"expected dtype float32 with shape \[-1, 3\], got int64 with shape \[1, 4\]"):
        decode_predict({"instances": [[1, 2, 3, 4]]}, X3)


def test_numeric_inputs_are_charged_against_the_request_budget_before_any_array():
    rows = [[0, 0, 0]] * 1000  # 3000 float32 values: 12000 bytes
    assert decode_predict({"instances": rows}, X3, max_bytes=12000)[0]["x"].shape == (1000, 3)
    for body, s in [
        ({"instances": rows}, X3),
        ({"inputs": rows}, X3),
        ({"inputs": {"x": rows}}, X3),
        ({"instances": [{"a": [0, 0], "b": 0}] * 1000}, MULTI),  # 8000 + 8000 bytes: only together too many
    ]:
        with pytest.raises(errors.InvalidInput, match=r"over the limit of 11999 bytes .*--max-request-mb"):
            decode_predict(body, s, max_bytes=11999)
    # strings carry the body's own bytes and are not charged; no budget means none is applied
    assert decode_predict({"instances": ["x" * 100] * 200}, IMG, max_bytes=10)[0]["image_bytes"].shape == (200,)
    assert decode_predict({"instances": rows}, X3)[0]["x"].shape == (1000, 3)
    # lists longer than the first element says are ragged: refused as such, not let through
    with pytest.raises(errors.InvalidInput, match="shape"):
        decode_predict({"instances": [[0, 0, 0], [0] * 100000]}, X3, max_bytes=100)


def test_request_shape_errors():
    with pytest.raises(errors.InvalidInput, match="only one of 'instances' or 'inputs'"):
        decode_predict({"instances": [1], "inputs": [1]}, X3)
    with pytest.raises(errors.InvalidInput, match="missing the 'instances' or 'inputs' key"):
        decode_predict({"data": [1]}, X3)
    with pytest.raises(errors.InvalidInput, match="empty list"):
        decode_predict({"instances": []}, X3)
    with pytest.raises(errors.InvalidInput, match="must be a JSON object"):
        decode_predict([1, 2], X3)


def test_encode_row_single_output_bare_values():
    out = encode_predict({"y": np.array([[1.5, 2.0]], np.float32)}, "row", X3)
    assert out == {"predictions": [[1.5, 2.0]]}


def test_encode_row_multiple_outputs_one_object_per_row():
    out = encode_predict({"p": np.array([0.5, 0.25], np.float32), "c": np.array([1, 2])}, "row", X3)
    assert out == {"predictions": [{"c": 1, "p": 0.5}, {"c": 2, "p": 0.25}]}


def test_encode_columnar():
    assert encode_predict({"y": np.array([1, 2])}, "columnar") == {"outputs": [1, 2]}
    out = encode_predict({"y": np.array([1]), "s": np.array(3.0)}, "columnar")
    assert out == {"outputs": {"s": 3.0, "y": [1]}}


def test_encode_row_inconsistent_batch_is_model_error():
    with pytest.raises(errors.ModelError, match="leading batch dimension"):
        encode_predict({"a": np.zeros(2), "b": np.zeros(3)}, "row")


def test_encode_strings_utf8_b64_and_bytes_suffix():
    out = encode_predict(
        {
            "label": np.array([b"cat", "h\xe9".encode()], dtype=object),
            "raw": np.array([b"\xff\xfe", b"ok"], dtype=object),
            "thumb_bytes": np.array([b"abc", b"d"], dtype=object),
        },
        "row",
    )
    first = out["predictions"][0]
    assert first["label"] == "cat"
    assert out["predictions"][1]["label"] == "h\xe9"
    assert first["raw"] == {"b64": base64.b64encode(b"\xff\xfe").decode()}
    assert out["predictions"][1]["raw"] == "ok"
    assert first["thumb_bytes"] == {"b64": base64.b64encode(b"abc").decode()}


def test_nan_and_inf_serialize_as_tfs_tokens():
    out = encode_predict({"y": np.array([np.nan, np.inf, -np.inf, 1.0], np.float32)}, "row")
    text = json.dumps(out)
    assert text == '{"predictions": [NaN, Infinity, -Infinity, 1.0]}'
    assert math.isnan(json.loads(text)["predictions"][0])


def test_float32_values_round_trip_and_shortest_option():
    a = np.array([0.1, 1 / 3, 1e-8, 3e38], np.float32)
    fast = encode_predict({"y": a}, "row")["predictions"]
    np.testing.assert_array_equal(np.array(fast, np.float32), a)
    short = encode_predict({"y": a}, "row", shortest_floats=True)["predictions"]
    np.testing.assert_array_equal(np.array(short, np.float32), a)
    assert json.dumps(short[0]) == "0.1"


def python_calls(fn):
    """``fn()`` and how many function calls (Python or builtin) the interpreter made for it."""
    calls = 0

    def profile(frame, event, arg):
        nonlocal calls
        if event in ("call", "c_call"):
            calls += 1

    sys.setprofile(profile)
    try:
        result = fn()
    finally:
        sys.setprofile(None)
    return result, calls


def test_large_float_output_encodes_without_a_per_value_python_loop():
    big = np.random.default_rng(0).random((64, 224 * 224), dtype=np.float32)  # ~3.2M values
    out, calls = python_calls(lambda: encode_predict({"y": big}, "row"))
    assert len(out["predictions"]) == 64 and len(out["predictions"][0]) == 224 * 224
    np.testing.assert_array_equal(np.array(out["predictions"], np.float32), big)
    # tolist() in C: a handful of calls, where a per-element loop would make millions.
    assert calls < 200, calls


def test_classify_examples_with_context_and_types():
    from tensorflow.core.example import example_pb2

    body = {
        "context": {"w": 2.0, "tag": "ctx", "n": 1},
        "examples": [
            {"x": [1.0, 2.0], "n": 5, "blob": {"b64": base64.b64encode(b"\x00\x01").decode()}},
            {"x": [1, 2.5], "flag": True},
        ],
    }
    serialized = examples.decode_examples(body)
    assert serialized.dtype == object and len(serialized) == 2
    e0, e1 = (example_pb2.Example.FromString(s) for s in serialized)
    f0, f1 = e0.features.feature, e1.features.feature
    assert list(f0["x"].float_list.value) == [1.0, 2.0]
    assert list(f0["w"].float_list.value) == [2.0]
    assert list(f0["tag"].bytes_list.value) == [b"ctx"]
    assert list(f0["n"].int64_list.value) == [5]  # the example overrides the context
    assert list(f0["blob"].bytes_list.value) == [b"\x00\x01"]
    assert list(f1["x"].float_list.value) == [1.0, 2.5]
    assert list(f1["flag"].int64_list.value) == [1]
    assert list(f1["n"].int64_list.value) == [1]


def test_examples_errors():
    with pytest.raises(errors.InvalidInput, match="missing the 'examples' key"):
        examples.decode_examples({"instances": []})
    with pytest.raises(errors.InvalidInput, match="non-empty list"):
        examples.decode_examples({"examples": []})
    with pytest.raises(errors.InvalidInput, match=r"example 1: feature 'x' mixes value types \['bytes', 'float'\]"):
        examples.decode_examples({"examples": [{"x": 1.0}, {"x": [1.0, "a"]}]})
    with pytest.raises(errors.InvalidInput, match="example 0: feature 'x' has an element of unexpected JSON type: a list"):
        examples.decode_examples({"examples": [{"x": [[1.0]]}]})


def test_encode_classify_and_regress():
    out = examples.encode_classify(
        {"classes": np.array([[b"a", b"b"]], dtype=object), "scores": np.array([[0.25, 0.75]], np.float32)}
    )
    assert out == {"results": [[["a", 0.25], ["b", 0.75]]]}
    assert examples.encode_regress({"outputs": np.array([[1.5], [2.0]], np.float32)}) == {"results": [1.5, 2.0]}
