import json
import sys

import numpy as np

from tfbatch.runtime import jsonenc
from tfbatch.tfs.codec import encode_predict


def test_float32_written_in_shortest_round_trip_form():
    arr = np.array([[0.1, 1 / 3, 2.5e-8]], dtype=np.float32)
    text = jsonenc.dumps(encode_predict({"y": arr}, "row", native=True)).decode()
    assert text == '{"predictions":[[0.1,0.33333334,2.5e-8]]}'
    assert np.array_equal(np.array(json.loads(text)["predictions"], dtype=np.float32), arr)


def test_native_and_list_paths_agree_on_values():
    rng = np.random.default_rng(0)
    outputs = {"probabilities": rng.random((4, 5), dtype=np.float32), "classes": np.arange(4, dtype=np.int64)}
    native = json.loads(jsonenc.dumps(encode_predict(outputs, "row", native=True)))
    plain = json.loads(json.dumps(encode_predict(outputs, "row")))
    assert [row["classes"] for row in native["predictions"]] == [0, 1, 2, 3]
    np.testing.assert_array_equal(
        np.array([r["probabilities"] for r in native["predictions"]], dtype=np.float32),
        np.array([r["probabilities"] for r in plain["predictions"]], dtype=np.float32),
    )


def test_non_finite_values_keep_tf_serving_tokens():
    arr = np.array([1.0, np.nan, np.inf], dtype=np.float32)
    text = jsonenc.dumps(encode_predict({"y": arr}, "row", native=True)).decode()
    assert text == '{"predictions":[1.0,NaN,Infinity]}'


def test_loads_accepts_bytes_and_nan_tokens():
    assert jsonenc.loads(b'{"a": [1, 2]}') == {"a": [1, 2]}
    assert np.isnan(jsonenc.loads("[NaN]")[0])


def test_ten_megabyte_tensor_is_written_by_orjson_without_python_lists():
    big = np.random.default_rng(1).random((2_600_000,), dtype=np.float32)
    calls = 0

    def profile(frame, event, arg):
        nonlocal calls
        if event in ("call", "c_call"):
            calls += 1

    body = encode_predict({"y": big}, "row", native=True)
    assert isinstance(body["predictions"], np.ndarray)  # not nested Python lists of floats
    sys.setprofile(profile)
    try:
        fast = jsonenc.dumps(body)
    finally:
        sys.setprofile(None)
    assert len(fast) > 10_000_000
    np.testing.assert_array_equal(np.array(json.loads(fast)["predictions"], np.float32), big)
    # Written in one call: no tolist(), no per-value fallback into Python (speed itself is
    # measured in benchmarks/latency, not here).
    assert calls < 10, calls
