"""``codec.decode_numeric`` reads a body of numbers alone from its text: it must give what
``decode_predict`` gives for the parsed body, array for array (dtype, shape, bytes), the same
error for a value the signature refuses, and None, not a guess, for anything else."""

from __future__ import annotations

import json
import threading
from contextlib import contextmanager

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tfbatch import errors
from tfbatch.runtime import jsonenc
from tfbatch.runtime.jsonenc import dumps_like_stdlib, written_numbers
from tfbatch.runtime.signature import SignatureInfo, TensorInfo
from tfbatch.tfs.codec import ALONE, decode_numeric, decode_numeric_many, decode_predict, decode_written


def _sig(dtype: str = "float32", shape=(None, None, None)) -> SignatureInfo:
    return SignatureInfo("serving_default", "tensorflow/serving/predict",
                         {"x": TensorInfo("x", "x:0", dtype, shape)}, {"y": TensorInfo("y", "y:0", "float32", (None,))})


def _same(text: bytes, sig: SignatureInfo) -> None:
    fast = decode_numeric(text, sig)
    assert fast is not None, text[:200]
    slow = decode_predict(json.loads(text), sig)
    assert fast[1] == slow[1]
    (got,), (want,) = fast[0].values(), slow[0].values()
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.tobytes() == want.tobytes()


_ints = st.integers(min_value=-(10**18) + 1, max_value=10**18 - 1)
_floats = st.floats(allow_nan=False, allow_infinity=False, width=64)


@st.composite
def _arrays(draw):
    shape = draw(st.lists(st.integers(1, 4), min_size=1, max_size=4))
    size = int(np.prod(shape))
    kind = draw(st.sampled_from(["int", "float", "mixed"]))
    element = _ints if kind == "int" else _floats if kind == "float" else st.one_of(_ints, _floats)
    flat = draw(st.lists(element, min_size=size, max_size=size))
    return np.array(flat, dtype=object).reshape(shape).tolist()


@settings(max_examples=300, deadline=None)
@given(_arrays(), st.sampled_from(["instances", "inputs"]), st.sampled_from(["float32", "float64", "float16"]),
       st.sampled_from([None, 2, (",", ":")]), st.booleans())
def test_a_body_of_numbers_reads_as_the_parsed_body_does(value, key, dtype, layout, padded):
    indent, separators = (layout, None) if layout in (None, 2) else (None, layout)
    text = json.dumps({key: value}, indent=indent, separators=separators).encode()
    if padded:  # past _SMALL_BODY: the general way (the skeleton's shape, one flat parse)
        text = text.replace(b"[", b"[" + b" " * 4096, 1)
    _same(text, _sig(dtype, (None,) * len(np.shape(value))))


def test_integer_inputs_and_the_usual_script_bodies():
    pixels = np.arange(2 * 4 * 4 * 3).reshape(2, 4, 4, 3) % 256
    _same(json.dumps({"instances": pixels.tolist()}).encode(), _sig("float32", (None, 4, 4, 3)))
    _same(json.dumps({"instances": pixels.tolist()}).encode(), _sig("int32", (None, 4, 4, 3)))
    _same(json.dumps({"instances": (pixels / 255.0).tolist()}).encode(), _sig("float32", (None, 4, 4, 3)))
    _same(b' {"instances" : [[1e3, -0.0, 0, 2E-2, 0.00023153758980885681]] } \n', _sig("float64", (None, 5)))
    _same(b'{"instances": [[-0, 7, -12]]}', _sig("float32", (None, 3)))  # whole numbers: -0 is 0
    _same(b'{"instances": [[1.5, -0]]}', _sig("float64", (None, 2)))  # ... among floats too
    _same(b'{"instances": [9223372036854775807, -9223372036854775808]}', _sig("float32", (None,)))


def test_a_value_the_signature_refuses_gets_the_same_error():
    body = json.dumps({"instances": [[1.5, 2.5]]}).encode()
    sig = _sig("float32", (None, 3))
    with pytest.raises(errors.InvalidInput) as fast:
        decode_numeric(body, sig)
    with pytest.raises(errors.InvalidInput) as slow:
        decode_predict(json.loads(body), sig)
    assert str(fast.value) == str(slow.value)


@pytest.mark.parametrize("rows", [1, 300])  # read as lists, or from the text's skeleton
def test_a_shape_the_signature_refuses_gets_the_general_ways_error(rows):
    # The text readers put floats straight into a float32 input's dtype; the error names the
    # dtype of the array coerce refuses, float64 the general way. So they leave such a body to
    # the general way (None) or raise its very error; a noted request too.
    value = np.random.default_rng(rows).normal(size=(rows, 4)).tolist()
    body = json.dumps({"instances": value}).encode()
    sig = _sig("float32", (None, 3))
    with pytest.raises(errors.InvalidInput) as slow:
        decode_predict(json.loads(body), sig)
    assert "float64 with shape" in str(slow.value)
    for fast in (lambda: decode_numeric(body, sig),
                 lambda: decode_written("instances", jsonenc.numbers_array(value, np.float64), sig)):
        try:
            assert fast() is None
        except errors.InvalidInput as exc:
            assert str(exc) == str(slow.value)


@pytest.mark.parametrize("body", [
    b'{"instances": [[1, 2], [3]]}',  # ragged
    b'{"instances": [[1, 2, 3], [4]], "x": 1}',  # another key
    b'{"signature_name": "s", "instances": [[1]]}',
    b'{"instances": []}', b'{"instances": [[]]}', b'{"instances": [[], []]}',
    b'{"instances": [1, 2,, 3]}', b'{"instances": [1, 2 3]}', b'{"instances": [1, 2-3]}',
    b'{"instances": [+1]}', b'{"instances": [.5]}', b'{"instances": [5.]}', b'{"instances": [01]}',
    b'{"instances": [NaN]}', b'{"instances": [Infinity]}', b'{"instances": [true]}', b'{"instances": [null]}',
    b'{"instances": ["1"]}', b'{"instances": [{"b64": "AA=="}]}', b'{"instances": [1, 2]',
    b'{"instances": [123456789012345678901234]}',  # past int64: json keeps an int, orjson a float
    b'{"instances": [[1, 2], [3, 4]]] }', b'{"instances": [[1, 2], [3, 4]}',
    b'["instances", 1]', b'{"inputs": {"x": [1]}}',
])
@pytest.mark.parametrize("padding", [0, 5000])
def test_anything_else_goes_the_general_way(body, padding):
    # Padded past codec._SMALL_BODY, the same bodies take the skeleton's way instead of NumPy's.
    body = body.replace(b"[", b"[" + b" " * padding, 1)
    assert decode_numeric(body, _sig("float32", None)) is None


def test_a_string_input_or_several_inputs_go_the_general_way():
    body = b'{"instances": [[1, 2]]}'
    assert decode_numeric(body, _sig("string", (None, 2))) is None
    two = SignatureInfo("s", "m", {k: TensorInfo(k, f"{k}:0", "float32", (None, 2)) for k in "ab"}, {})
    assert decode_numeric(body, two) is None


def test_a_body_over_the_budget_goes_the_general_way_which_names_the_limit():
    body = json.dumps({"instances": [[0.5] * 100] * 10}).encode()
    assert decode_numeric(body, _sig("float32", (None, 100)), max_bytes=3999) is None
    assert decode_numeric(body, _sig("float32", (None, 100)), max_bytes=4000) is not None
    small = json.dumps({"instances": [[0.5] * 10] * 2}).encode()  # read the small body's way
    assert decode_numeric(small, _sig("float32", (None, 10)), max_bytes=79) is None
    assert decode_numeric(small, _sig("float32", (None, 10)), max_bytes=80) is not None


def test_deep_nesting_goes_the_general_way_at_once():
    deep = b'{"instances": ' + b"[" * 200_000 + b"1" + b"]" * 200_000 + b"}"
    assert decode_numeric(deep, _sig("float32", None)) is None
    dims = 32
    body = b'{"instances": ' + b"[" * dims + b"1" + b"]" * dims + b"}"
    tensors, _ = decode_numeric(body, _sig("float32", None))
    assert tensors["x"].shape == (1,) * dims
    # Spaces between the brackets do not hide the depth, in a small body or a large one.
    for pad in (b" ", b" " * 200):
        spaced = b'{"instances": ' + (b"[" + pad) * 33 + b"1" + (pad + b"]") * 33 + b"}"
        assert decode_numeric(spaced, _sig("float32", None)) is None
        spaced = b'{"instances": ' + (b"[" + pad) * dims + b"1" + (pad + b"]") * dims + b"}"
        assert decode_numeric(spaced, _sig("float32", None))[0]["x"].shape == (1,) * dims


# A script's ``json.dumps`` (jsonenc's look-alike) notes the numbers of a request it writes, and
# the reader of that very text on the same thread takes them instead of parsing the text back
# (``written_numbers`` -> ``decode_written``): it must give what ``decode_numeric`` reads from
# the text, array for array, the same error, and nothing where that reads nothing.

_leaves = st.one_of(_ints, _floats, st.booleans(), st.none(), st.text(max_size=2),
                    st.integers(min_value=2**63 - 2, max_value=2**64 - 1))
_nested = st.recursive(_leaves, lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner), max_leaves=24)


@contextmanager
def _noting_every_size():
    """Notes for texts of any length (``NOTE_AT`` leaves short ones to be read back): the same
    reading must come out whatever the size."""
    at = jsonenc.NOTE_AT
    jsonenc.NOTE_AT = 0
    try:
        yield
    finally:
        jsonenc.NOTE_AT = at


def _same_as_text(value, key: str, sig: SignatureInfo, separators) -> bool:
    """Whether the text was noted; if so, the note read as the text reads."""
    text = dumps_like_stdlib({key: value}, separators=separators)
    assert text == json.dumps({key: value}, separators=separators)  # the look-alike's text, noted or not
    written = written_numbers(text)
    if written is None:  # not noted (a text the standard library wrote, a tiny number, say): read from its text
        return False
    try:
        want = decode_numeric(text.encode(), sig)
    except errors.InvalidInput as err:
        with pytest.raises(errors.InvalidInput) as got:
            decode_written(*written[:2], sig)
        assert str(got.value) == str(err)
        return True
    got = decode_written(*written[:2], sig)
    if want is None:
        assert got is None
        return True
    assert got is not None and got[1] == want[1]
    (a,), (b,) = got[0].values(), want[0].values()
    assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    return True


@settings(max_examples=300, deadline=None)
@given(_arrays(), st.sampled_from(["instances", "inputs"]), st.sampled_from(["float32", "float64", "float16", "int64"]),
       st.sampled_from([None, (",", ":")]))
def test_numbers_noted_by_the_scripts_dumps_read_as_its_text_does(value, key, dtype, separators):
    with _noting_every_size():
        _same_as_text(value, key, _sig(dtype, (None,) * len(np.shape(value))), separators)
        _same_as_text(value, key, _sig(dtype, None), separators)


@settings(max_examples=400, deadline=None)
@given(_nested, st.sampled_from(["instances", "inputs", "x"]), st.sampled_from([None, (",", ":")]))
def test_anything_but_numbers_alone_is_not_noted_or_reads_as_its_text_does(value, key, separators):
    with _noting_every_size():
        _same_as_text(value, key, _sig("float32", None), separators)


def test_an_image_sized_request_is_noted_and_one_csv_lines_is_read_back():
    pixels = (np.arange(32 * 32 * 3).reshape(1, 32, 32, 3) % 256) / 255.0
    sig = _sig("float32", (None, 32, 32, 3))
    assert _same_as_text(pixels.tolist(), "instances", sig, None)
    assert _same_as_text(pixels.tolist(), "inputs", sig, (",", ":"))
    assert _same_as_text((pixels * 255).astype(int).tolist(), "instances", sig, None)  # whole numbers
    assert not _same_as_text([[0.25] * 32], "instances", _sig("float32", (None, 32)), None)
    # A number below 1e-4, which orjson spells otherwise, is spelled again (json.dumps's text,
    # checked in _same_as_text); so many of them that the standard library is sooner: its text.
    tiny = pixels.copy()
    tiny[0, 0, 0, :] = [5e-5, -1.5e-5, 2.5e-7]
    tiny[0, 31, 31, 2] = -3e-300
    assert _same_as_text(tiny.tolist(), "instances", sig, None)
    assert _same_as_text(tiny.tolist(), "instances", sig, (",", ":"))
    assert not _same_as_text((pixels * 1e-6).tolist(), "instances", sig, None)


def test_a_note_is_the_lists_as_they_were_written_and_only_for_that_text_on_that_thread():
    with _noting_every_size():
        _note_is_the_lists_as_they_were_written()


def _note_is_the_lists_as_they_were_written():
    rows = [[0.5, 1.5], [2.5, 3.5]]
    text = dumps_like_stdlib({"instances": rows})
    rows[0][0] = 99.0  # changed after json.dumps returned: the text, and the note, hold 0.5
    other = dumps_like_stdlib({"instances": [[7.5]]})
    assert written_numbers(text) is None  # only the last text of the thread is noted
    assert written_numbers("".join(other)) is None  # an equal string is not the one written
    again = dumps_like_stdlib({"instances": rows})
    rows[0][0] = 0.5
    seen = []
    thread = threading.Thread(target=lambda: seen.append(written_numbers(again)))
    thread.start()
    thread.join()
    assert seen == [None]  # another thread's text
    key, array, named = written_numbers(again)
    assert key == "instances" and array.tolist() == [[99.0, 1.5], [2.5, 3.5]] and named is None
    assert written_numbers(again) is None  # taken once
    # The text's bytes (a script's json.dumps(...).encode()) are that text; other bytes are not.
    encoded = dumps_like_stdlib({"instances": rows}, separators=(",", ":"))
    assert written_numbers(encoded.encode("utf-8").replace(b"0.5", b"0.6")) is None
    assert written_numbers(bytearray(encoded.encode())) is None and written_numbers(encoded[:-1] + " ") is None
    assert written_numbers(encoded.encode("utf-8"))[0] == "instances"
    assert written_numbers(encoded.encode("utf-8")) is None  # taken once
    for value in ({"instances": [[1, 2]], "x": 1}, {"instances": [["a"]]}, {"instances": [[True]]},
                  {"instances": [[None]]}, {"inputs": {"x": [1.5]}}, [[1.5]], {"instances": []}):
        assert written_numbers(dumps_like_stdlib(value)) is None, value


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.text(max_size=12), st.sampled_from(["serving_default", "predict", "a b", 'say "x"', "tab\t",
                                                                  "a,b", "k: v", ", :,", "0.00001"]),
                 st.integers(), st.none()),
       st.booleans(), st.sampled_from([None, (",", ":")]))
def test_a_request_naming_its_signature_is_noted_with_the_name_where_both_spell_it_alike(name, first, separators):
    # {"signature_name": ..., "instances": [...]}: the standard library's text whatever the
    # name; noted (with the name) only for a plain name written first, as scripts write it.
    rows = (np.arange(12).reshape(1, 2, 2, 3) / 7.0).tolist()
    value = {"signature_name": name, "instances": rows} if first else {"instances": rows, "signature_name": name}
    with _noting_every_size():
        text = dumps_like_stdlib(value, separators=separators)
        assert text == json.dumps(value, separators=separators)
        written = written_numbers(text)
    plain = first and isinstance(name, str) and name.isascii() and name.isprintable() \
        and '"' not in name and "\\" not in name
    if not plain:
        assert written is None
        return
    key, array, named = written
    assert key == "instances" and named == name and array.tolist() == rows
    assert json.loads(text) == value


# A hop's small bodies read together (``decode_numeric_many``): each must read as it reads alone
# (``decode_numeric``): the same tensors, layout and error, or None; ``ALONE`` leaves it to that.

def _alone(text: bytes, sig: SignatureInfo):
    try:
        return decode_numeric(text, sig)
    except errors.InvalidInput as err:
        return err


def _many_as_alone(texts: list[bytes], sig: SignatureInfo) -> int:
    """How many of ``texts`` were read together; each reads as it does alone."""
    together = 0
    for text, got in zip(texts, decode_numeric_many(texts, sig)):
        want = _alone(text, sig)
        if got is ALONE:
            continue
        if got is None:
            assert want is None, text
            continue
        together += 1
        assert not isinstance(want, Exception), (text, want)
        assert want is not None and got[1] == want[1], text
        (a,), (b,) = got[0].values(), want[0].values()
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes(), text
    return together


_line_values = st.one_of(
    _arrays(),
    st.lists(st.lists(st.one_of(_ints, _floats), min_size=3, max_size=3), min_size=1, max_size=2),
    _nested,
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_line_values, st.sampled_from(["instances", "inputs"])), min_size=1, max_size=12),
       st.sampled_from(["float32", "float64", "float16", "int32", "int64", "uint8"]),
       st.sampled_from([None, (None, 3), (None, 1, 3), (2, 3)]), st.sampled_from([None, (",", ":")]))
def test_bodies_read_together_read_as_each_reads_alone(bodies, dtype, shape, separators):
    texts = [json.dumps({key: value}, separators=separators).encode() for value, key in bodies]
    _many_as_alone(texts, _sig(dtype, shape))


def test_a_csv_jobs_lines_are_read_together_and_the_odd_ones_alone():
    rng = np.random.default_rng(3)
    lines = [json.dumps({"instances": [np.round(rng.normal(size=32), 4).tolist()]}).encode() for _ in range(40)]
    sig = _sig("float32", (None, 32))
    assert _many_as_alone(lines, sig) == 40
    # whole-number lines form their own group; a line of 31 numbers, one with a string, one the
    # signature refuses and one that is not JSON each read alone, and the others still together
    odd = [b'{"instances": [[' + b",".join([b"7"] * 32) + b"]]}",
           b'{"instances": [[' + b",".join([b"7"] * 32) + b"]]}",
           b'{"instances": [[' + b",".join([b"0.5"] * 31) + b"]]}",
           b'{"instances": [["1"' + b",0.5" * 31 + b"]]}",
           b'{"instances": [[1e400' + b",0.5" * 31 + b"]]}",
           b'{"instances": [[true' + b",0.5" * 31 + b"]]}",
           b'{"instances": [[0.5,,' + b",0.5" * 30 + b"]]}"]
    texts = lines[:20] + odd + lines[20:]
    found = decode_numeric_many(texts, sig)
    assert [found[n] is ALONE for n in range(20, 27)] == [False, False, True, True, True, True, True]
    # the odd ones' group is read in halves: all but a few of its lines stay together
    assert _many_as_alone(texts, sig) >= 38
    assert found[20][0]["x"].dtype == np.float32
    # a signature that fixes the first dimension: each alone (a group of two would pass (2, 32))
    assert decode_numeric_many(lines[:2], _sig("float32", (1, 32))) == [ALONE, ALONE]
    # one body alone in its group, strings for the signature, another key: as alone
    assert decode_numeric_many(lines[:1], sig) == [ALONE]
    assert decode_numeric_many(lines[:2], _sig("string", (None, 32))) == [None, None]
    assert _many_as_alone([b'{"inputs": [[1.5]]}', b'{"inputs": [[2.5]]}', b'["instances"]'], sig) == 0


# ``numbers_array`` (the note's array) packs the leaves with ``struct``: it must give what
# ``np.array`` of the same lists gives (values, dtype, shape), and None exactly where that
# fails or is not a rectangular array of numbers (ragged, empty, a list below a number, an int
# past int64 where the text is whole numbers).

_number_lists = st.recursive(
    st.one_of(_ints, _floats, st.integers(min_value=2**63 - 2, max_value=2**64 - 1)),
    lambda inner: st.lists(inner, min_size=0, max_size=4) | st.tuples(inner, inner), max_leaves=24)


def _numpy_reading(value, dtype):
    try:
        array = np.array(value, dtype=dtype)
    except (TypeError, ValueError, OverflowError):
        return None
    if array.size == 0 or array.ndim == 0 or array.ndim > jsonenc.MAX_NUMBER_DEPTH:
        return None
    return array


@settings(max_examples=400, deadline=None)
@given(st.one_of(_arrays(), st.lists(_number_lists, min_size=1, max_size=4)), st.sampled_from([np.int64, np.float64]))
def test_numbers_array_reads_the_lists_as_numpy_does(value, dtype):
    text = json.dumps(value)
    if dtype is np.int64 and any(c in text for c in ".eE"):  # the caller asks for int64 where the text is whole
        dtype = np.float64
    got, want = jsonenc.numbers_array(value, dtype), _numpy_reading(value, dtype)
    if want is None:
        assert got is None
        return
    assert got is not None and got.dtype == want.dtype and got.shape == want.shape
    assert got.tobytes() == want.tobytes()


def test_numbers_array_refuses_what_is_not_one_array_of_numbers():
    for value in ([[1, 2], [3]], [[1, [2]]], [1, [2]], [[], []], [], [[1.5, 2]], [2**64 - 1], [[[1]], [2]],
                  [[[1], [2, 3]]]):
        assert jsonenc.numbers_array(value, np.int64) is None, value
    assert jsonenc.numbers_array([[1, 2**64 - 1]], np.float64).tolist() == [[1.0, float(2**64 - 1)]]
    assert jsonenc.numbers_array(((1, 2), (3, 4)), np.int64).shape == (2, 2)


def test_numbers_array_packs_a_payloads_worth_of_numbers_in_slices():
    # past jsonenc._PACK_SLICE numbers the leaves are packed a slice at a time: every slice
    # lands where it belongs, and a bad leaf in the last slice still refuses the whole
    rng = np.random.default_rng(7)
    count = 2 * jsonenc._PACK_SLICE + 3
    floats, ints = rng.random((count, 2)), rng.integers(-2**62, 2**62, (count, 2))
    assert jsonenc.numbers_array(floats.tolist(), np.float64).tobytes() == floats.tobytes()
    assert jsonenc.numbers_array(ints.tolist(), np.int64).tobytes() == ints.astype(np.int64).tobytes()
    rows = ints.tolist()
    rows[-1][1] = 2**64 - 1
    assert jsonenc.numbers_array(rows, np.int64) is None
    rows[-1][1] = [1]
    assert jsonenc.numbers_array(rows, np.float64) is None
