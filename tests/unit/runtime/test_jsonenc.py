import json
import sys

import numpy as np
import pytest

from tests.support.typed import typed
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


# ---- compact_dumps: the standard library's compact bytes, by orjson where they agree ----

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=True, allow_infinity=True)
    | st.integers(min_value=-2**80, max_value=2**80) | st.text(),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=30,
)


def _stdlib(value):
    return json.dumps(value, separators=(",", ":")).encode()


@settings(max_examples=400, deadline=None)
@given(_JSON_VALUES)
def test_compact_dumps_writes_the_standard_librarys_bytes(value):
    assert jsonenc.compact_dumps(value) == _stdlib(value)


def test_compact_dumps_on_the_spellings_where_orjson_differs():
    # each of these is written differently by orjson (raw UTF-8 or DEL, null for NaN, 1e-6,
    # 0.00001, a 65-bit integer, a non-string key); the result must still be the standard one
    for value in (["é", "\u2028"], ["\x7f"], [float("nan"), float("inf")], [1.5e-6, 2.5e-7],
                  [0.00001, -0.000031], [2**64, -2**63 - 1], {1: 2}, ["null", "e-", "0.0000"],
                  [0.05674915, 1e16, 1.0, -0.0, 5e-324], {"SageMakerOutput": {"predictions": [[0.5]]}}):
        assert jsonenc.compact_dumps(value) == _stdlib(value), value


def test_a_row_reads_the_same_beside_a_non_finite_row():
    # NaN in one row must not change how the other rows' floats are written
    rows = np.array([[0.1, 1 / 3], [np.nan, -np.inf]], dtype=np.float32)
    batch = jsonenc.dumps({"predictions": jsonenc.native_array(rows)})
    alone = jsonenc.dumps({"predictions": jsonenc.native_array(rows[:1])})
    assert batch == b'{"predictions":[[0.1,0.33333334],[NaN,-Infinity]]}'
    assert alone == b'{"predictions":[[0.1,0.33333334]]}'


# ---- fast_loads: orjson's value only where it is the standard library's ----

def _fast_or_stdlib(data):
    value = jsonenc.fast_loads(data)
    return json.loads(data) if value is jsonenc.UNREAD else value


# Long strings take a body past the size where the scan runs first: the walk decides there.
_PADDED = st.tuples(_JSON_VALUES, st.integers(min_value=0, max_value=6000)).map(
    lambda pair: {"pad": "x" * pair[1], "value": pair[0]})


@settings(max_examples=300, deadline=None)
@given(_PADDED)
def test_fast_loads_gives_the_standard_librarys_value_or_unread(value):
    text = json.dumps(value)
    for data in (text, text.encode()):
        assert typed(_fast_or_stdlib(data)) == typed(json.loads(text))


def test_fast_loads_leaves_long_integers_to_the_standard_library_in_large_bodies():
    image = "QUJD" * 2000  # a base64 text: the kind of body the walk spares the scan
    for big in (2**64, -2**63 - 1, 10**30):
        for value in ({"instances": [{"b64": image}], "n": big},           # beside the strings
                      {"instances": [{"b64": image, "k": [[1, [big]]]}]},  # nested deep
                      {"pad": image, "v": list(range(100)) + [big]},      # past the walk's budget
                      {"words": ["ab"] * 2000 + [big]}):                   # past it, in strings
            text = json.dumps(value)
            assert len(text) > 4096
            assert jsonenc.fast_loads(text) is jsonenc.UNREAD, value
            assert jsonenc.loads(text) == value
    plain = {"instances": [{"b64": image}] * 3}
    assert jsonenc.fast_loads(json.dumps(plain)) == plain  # no number in it: read by orjson


# ---- dumps_like_stdlib / loads_like_stdlib: an inference.py's json.dumps / json.loads ----

_KEYS = st.text(alphabet=st.sampled_from('ab ,:"\\é\x7f\x01'), max_size=4)
_SCRIPT_VALUES = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=True, allow_infinity=True)
    | st.floats(min_value=-1e-3, max_value=1e-3) | st.floats(width=32).map(float)
    | st.integers(min_value=-2**70, max_value=2**70) | st.text(max_size=6) | _KEYS,
    lambda inner: st.lists(inner, max_size=5) | st.lists(inner, max_size=3).map(tuple)
    | st.dictionaries(_KEYS, inner, max_size=4),
    max_leaves=30,
)
_LAYOUTS = ({}, {"separators": (",", ":")}, {"separators": [", ", ": "]}, {"separators": None},
            {"ensure_ascii": True, "allow_nan": True, "sort_keys": False})


@settings(max_examples=400, deadline=None)
@given(_SCRIPT_VALUES)
def test_dumps_like_stdlib_writes_the_standard_librarys_text(value):
    for kwargs in _LAYOUTS:
        assert jsonenc.dumps_like_stdlib(value, **kwargs) == json.dumps(value, **kwargs), kwargs


# Past jsonenc._SPLIT_AT bytes the text outside strings alone is searched for the spellings
# that differ: long strings holding those words (and quotes, backslashes, non-ASCII) beside
# values that are spelled otherwise outside strings.
_WORDS = st.sampled_from(["null", "e-", "0.0000", "1e-05", '"', "\\", "é", "\x7f", "abc", ", ", ": ", "NaN"])
_LONG = st.lists(_WORDS, min_size=150, max_size=250).map("".join)


@settings(max_examples=300, deadline=None)
@given(_LONG, _SCRIPT_VALUES, st.booleans())
def test_dumps_like_stdlib_writes_the_standard_librarys_text_beside_long_strings(text, value, first):
    for body in ([text, value] if first else [value, text], {"b64": text, "v": value}, {text[:40]: value, "x": text}):
        for kwargs in _LAYOUTS:
            assert jsonenc.dumps_like_stdlib(body, **kwargs) == json.dumps(body, **kwargs), kwargs
        assert jsonenc.compact_dumps(body) == json.dumps(body, separators=(",", ":")).encode()


def _outcome(call, *args, **kwargs):
    try:
        return "value", call(*args, **kwargs)
    except Exception as exc:  # the same exception, type and words, is the contract
        return "raised", type(exc), str(exc)


def test_dumps_like_stdlib_on_what_orjson_writes_otherwise_or_refuses():
    from collections import OrderedDict, namedtuple
    from dataclasses import dataclass
    from datetime import date
    from enum import IntEnum

    class Flag(IntEnum):
        ON = 1

    class Text(str):
        pass

    @dataclass
    class Point:
        x: int

    cycle: list = []
    cycle.append(cycle)
    values = [
        {"instances": [[0.1, 1e-05, 2.5e-7, 1e16, -0.0, 5e-324]]}, [float("nan"), float("-inf")],
        ["é", "\u2028", "\x7f", 'a"b', "c\\d", "e,f: g"], {1: 2, None: 3, 2.5: True}, [2**64, -2**63 - 1],
        OrderedDict(a=1), [np.float64(0.25), np.float32(0.5)], Flag.ON, [Text("x")], namedtuple("P", "a b")(1, 2),
        Point(1), date(2026, 1, 1), {1, 2}, b"bytes", cycle, {"deep": [[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]},
    ]
    for value in values:
        for kwargs in _LAYOUTS + ({"sort_keys": True}, {"indent": 2}, {"ensure_ascii": False},
                                  {"separators": (",", ": ")}, {"allow_nan": False}, {"default": str}):
            assert _outcome(jsonenc.dumps_like_stdlib, value, **kwargs) == _outcome(json.dumps, value, **kwargs), \
                (value, kwargs)
    nested = [1]
    for _ in range(300):  # deeper than orjson goes (254)
        nested = [nested]
    assert jsonenc.dumps_like_stdlib(nested) == json.dumps(nested)


def test_dumps_like_stdlib_takes_orjsons_text_for_a_tf_serving_request():
    # what the fast path is for; that it is taken is seen from its speed in the benchmarks,
    # here only that the text is the standard one for a request of float32 pixels
    pixels = (np.arange(64 * 64 * 3, dtype=np.float32).reshape(64, 64, 3) % 256) / 255.0
    body = {"instances": [pixels.tolist()]}
    assert jsonenc.dumps_like_stdlib(body) == json.dumps(body)
    assert jsonenc.dumps_like_stdlib(body, separators=(",", ":")) == json.dumps(body, separators=(",", ":"))


@settings(max_examples=300, deadline=None)
@given(_PADDED)
def test_loads_like_stdlib_reads_the_standard_librarys_value(value):
    text = json.dumps(value)
    for data in (text, text.encode(), bytearray(text.encode())):
        assert typed(jsonenc.loads_like_stdlib(data)) == typed(json.loads(text))


def test_loads_like_stdlib_raises_what_the_standard_library_raises():
    from decimal import Decimal

    for data in ("", "[1,", "{'a': 1}", '{"a": NaN}', "[Infinity]", "[" + "9" * 30 + "]", '"\\ud800"',
                 b"\xef\xbb\xbf[1]", "[1] x", "\ufeff[1]", '[1.5e400]', memoryview(b"[1]"), 12, None,
                 "[1]".encode("utf-16"), b"\xff"):
        assert _outcome(jsonenc.loads_like_stdlib, data) == _outcome(json.loads, data), data
    assert jsonenc.loads_like_stdlib("[1.5]", parse_float=Decimal) == [Decimal("1.5")]


@pytest.mark.parametrize("value", [
    [0.5, 1e-05, -1.5e-05, 2.5e-07, 1e-10, 5e-324, 10.00001, 1e16, -0.0],
    {"a": "0.00001 e-5", "b": [1e-05, "x"], "c": 1.5e-06},  # the look-alikes inside strings stay
    {"k": ["0.0000" * 200, 3e-05]},  # long enough to be split at quotes
    [1e-07] * 100,  # more than one per _RESPELL_BYTES: the standard library's text
])
def test_numbers_below_1e_4_are_spelled_as_the_standard_library_spells_them(value):
    compact_dumps, compact_dumps_many, dumps_like_stdlib = (jsonenc.compact_dumps, jsonenc.compact_dumps_many,
                                                            jsonenc.dumps_like_stdlib)
    assert compact_dumps(value) == json.dumps(value, separators=(",", ":")).encode()
    assert dumps_like_stdlib(value) == json.dumps(value)
    assert compact_dumps_many([value, value]) == [json.dumps(value, separators=(",", ":")).encode()] * 2


def test_a_few_numbers_below_1e_4_are_spelled_again_not_left_to_the_standard_library():
    import orjson

    for value, want in (([0.5, 1e-05, 2.5e-07], b"[0.5,1e-05,2.5e-07]"),
                        ({"a": "1e-5" * 200, "b": 1e-05}, b'{"a":"' + b"1e-5" * 200 + b'","b":1e-05}'),
                        ({"k": ["x" * 600, -3e-05]}, b'{"k":["' + b"x" * 600 + b'",-3e-05]}')):
        assert jsonenc._as_stdlib(orjson.dumps(value)) == want
    assert jsonenc._as_stdlib(orjson.dumps({"a": "0.00001", "b": 1e-05})) is None  # short, quoted: not told apart
    assert jsonenc._as_stdlib(orjson.dumps([1e-07] * 100)) is None
