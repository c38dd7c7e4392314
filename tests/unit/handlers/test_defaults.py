import pytest

from tfbatch.errors import InvalidInput, UnsupportedMediaType
from tfbatch.handlers.defaults import json_request, media_type


def test_media_type_strips_parameters_and_defaults_to_json():
    assert media_type("Text/CSV; charset=utf-8") == "text/csv"
    assert media_type(None) == "application/json"


@pytest.mark.parametrize("body", [b'{"instances": [1]}', b'{"inputs": {"x": [1]}}', b'{"examples": [{}]}'])
def test_tfs_shaped_json_passes_through(body):
    import json

    assert json_request(body, "application/json") == json.loads(body)


def test_other_json_is_wrapped_as_one_instance():
    assert json_request(b"[1, 2, 3]", "application/json") == {"instances": [[1, 2, 3]]}
    assert json_request(b'{"a": 1}', "application/json") == {"instances": [{"a": 1}]}


def test_json_that_opens_with_two_brackets_is_the_list_of_instances():
    # The container's rule: what the SDK's JSONSerializer sends for a numpy array with a batch dimension.
    assert json_request(b"[[1, 2, 3], [4, 5, 6]]", "application/json") == {"instances": [[1, 2, 3], [4, 5, 6]]}
    assert json_request(b' [ [[0.5], [1]] ]', "application/json") == {"instances": [[[0.5], [1]]]}
    assert json_request(b"[[]]", "application/json") == {"instances": [[]]}
    assert json_request(b"[]", "application/json") == {"instances": [[]]}
    assert json_request(b'[{"a": 1}]', "application/json") == {"instances": [[{"a": 1}]]}


def test_json_lines_become_instances():
    body = b'[1, 2]\n\n{"x": 3}\n'
    assert json_request(body, "application/jsonlines") == {"instances": [[1, 2], {"x": 3}]}


@pytest.mark.parametrize("body, rows", [(b'[1, 2]\n{"x": 3}\n', 2), (b'{"a": 1}\r\n\r\n{"a": 2}', 2),
                                        (b'[1]\n[2]\n[3]', 3)])
def test_json_lines_sent_as_application_json_become_instances(body, rows):
    # What a MultiRecord job's payload of JSON lines is; the container reads it as JSON Lines.
    assert json_request(body, "application/json") == json_request(body, "application/jsonlines")
    assert len(json_request(body, "application/json")["instances"]) == rows


def test_application_json_lines_errors_name_the_line_and_tfs_bodies_are_not_split():
    with pytest.raises(InvalidInput, match="application/json body line 2 is not valid JSON"):
        json_request(b'[1]\n[2, \n', "application/json")
    # A body naming "instances" goes to the model as it is (the container's order): one document or an error.
    with pytest.raises(InvalidInput, match="application/json body is not valid JSON"):
        json_request(b'{"instances": [1]}\n{"instances": [2]}', "application/json")
    # Scalars on lines are not JSON Lines to the container either.
    with pytest.raises(InvalidInput, match="application/json body is not valid JSON"):
        json_request(b"1\n2\n", "application/json")


def test_csv_rows_become_numeric_instances():
    body = b"1,2.5,abc\n\n4,5,6\n"
    assert json_request(body, "text/csv") == {"instances": [[1, 2.5, "abc"], [4, 5, 6]]}
    assert json_request(b"7\n8\n", "text/csv") == {"instances": [7, 8]}


def test_a_csv_field_past_the_csv_module_limit_is_bad_input_that_says_so():
    """The csv module's own error (an unlabelled 500 before) becomes a 400 naming the row and the limit."""
    with pytest.raises(InvalidInput, match=r"text/csv body is not CSV .*\(row 2: field larger than field limit"
                                           r" \(131072\)\); expected rows of values, each field at most 131,072"):
        json_request(b"1,2,3\n" + b"x" * 200_000 + b"\n", "text/csv")


def test_unsupported_media_type_is_415_with_the_type():
    with pytest.raises(UnsupportedMediaType) as err:
        json_request(b"x", "application/x-protobuf")
    assert err.value.status == 415
    assert str(err.value) == "Unsupported Media Type: application/x-protobuf"


def test_bad_json_names_the_problem():
    with pytest.raises(InvalidInput, match="application/json body is not valid JSON"):
        json_request(b"{nope", "application/json")
    with pytest.raises(InvalidInput, match="line 2"):
        json_request(b"[1]\n{bad\n", "application/jsonlines")


# ---- bulk paths: the same answer as the general path, or none -----------------------------

import json  # noqa: E402

import numpy as np  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests.support.typed import typed  # noqa: E402
from tfbatch.errors import TfbatchError  # noqa: E402
from tfbatch.handlers.defaults import table_tensors  # noqa: E402
from tfbatch.runtime.signature import SignatureInfo, TensorInfo  # noqa: E402
from tfbatch.tfs.codec import decode_predict  # noqa: E402


def _signature(dtype="float32", shape=(None, 3)):
    return SignatureInfo("serving_default", "tensorflow/serving/predict",
                         {"x": TensorInfo("x", "x:0", dtype, shape)}, {"y": TensorInfo("y", "y:0", "float32", (None,))})


def _general(body: bytes, sig) -> tuple[str, object]:
    """What the general path gives: ("ok", tensor) or ("error", message)."""
    try:
        return "ok", decode_predict(json_request(body, "text/csv"), sig)[0]["x"]
    except TfbatchError as exc:
        return "error", str(exc)


def _same_tensor(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def test_plain_numeric_csv_is_read_in_bulk_to_the_general_paths_tensor():
    sig = _signature()
    body = b"1,2.5,-3e2\r\n4,-0,6\n.5,7.,-0.0\n-00,-0e1,+8\n"
    bulk = table_tensors(body, "text/csv", sig)
    assert bulk is not None
    assert _same_tensor(bulk["x"], _general(body, sig)[1])
    one = _signature(shape=(None,))
    assert _same_tensor(table_tensors(b"7\n8", "text/csv", one)["x"], _general(b"7\n8", one)[1])


@pytest.mark.parametrize("body", [
    b"1,2,abc\n", b'1,"2",3\n', b"1,2,3\n\n4,5,6\n", b"1,2,3\n4,5\n", b"1,,3\n", b"1, 2,3\n", b"1,2,nan\n",
    b"1,2,1_0\n", b"1,2,99999999999999999999\n", b"1,2,3\r4,5,6\n", b"1,2,1e\n", b"1,2,.\n", b"",
    b"1,2,3,4\n",  # the signature wants 3 columns: the general path words the error
])
def test_anything_else_is_left_to_the_general_path(body):
    assert table_tensors(body, "text/csv", _signature()) is None


def test_only_a_single_float_or_integer_input_gets_the_bulk_path():
    body = b"1,2,3\n"
    assert table_tensors(body, "text/csv", _signature("string")) is None
    assert table_tensors(body, "text/csv", _signature("bool")) is None
    assert table_tensors(body, "application/json", _signature()) is None
    assert table_tensors(body, "text/csv", _signature("float64"))["x"].dtype == np.float64
    assert table_tensors(body, "text/csv", _signature("int64"))["x"].dtype == np.int64


def test_integer_csv_is_read_in_bulk_to_the_general_paths_tensor():
    body = b"1,+2,-3\r\n007,-0,9223372036854775807\n"
    for dtype in ("int64", "uint64"):
        sig = _signature(dtype)
        kind, general = _general(body, sig)
        bulk = table_tensors(body, "text/csv", sig)
        if kind == "ok":
            assert _same_tensor(bulk["x"], general)
        else:  # a negative value for uint64: the general path's error, not a wrapped value
            assert bulk is None
    small = b"1,2,3\n4,5,6\n"
    for dtype in ("int8", "int16", "int32", "uint8", "uint16", "uint32"):
        sig = _signature(dtype)
        assert _same_tensor(table_tensors(small, "text/csv", sig)["x"], _general(small, sig)[1])


@pytest.mark.parametrize("body", [b"1,2,3.0\n", b"1,2,1e3\n", b"1,2,9223372036854775808\n", b"1,2,-\n", b"1,2,\n",
                                  b"1,2,300\n"])
def test_integer_csv_the_bulk_path_leaves_alone(body):
    """Float cells, values past int64 or the input's dtype, empty or malformed cells: the
    general path reads or refuses them, with its own message."""
    sig = _signature("int8")
    assert table_tensors(body, "text/csv", sig) is None
    assert _general(body, sig)[0] == "error"


def _bulk_matches_the_general_path(rows: list[list[str]], newline: str, dtype: str) -> None:
    """Where the bulk path reads a CSV body of these rows, the general path reads it too, to
    the same tensor."""
    sig = _signature(dtype)
    body = newline.join(",".join(row) for row in rows).encode() + newline.encode()
    bulk = table_tensors(body, "text/csv", sig)
    if bulk is None:
        return
    kind, general = _general(body, sig)
    assert kind == "ok", general
    assert _same_tensor(bulk["x"], general)


_cells = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False, width=64).map(repr),
    st.floats(allow_nan=False, allow_infinity=False, width=32).map(lambda v: f"{v:.9g}"),
    st.integers(-2**60, 2**60).map(str),
    st.sampled_from(["-0", "-0.0", "-00", "-0e3", "+0", "0"]),
    st.text(alphabet="0123456789.eE+-", min_size=0, max_size=8),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(_cells, min_size=3, max_size=3), min_size=1, max_size=6), st.sampled_from(["\n", "\r\n"]),
       st.sampled_from(["float32", "float64"]))
def test_bulk_csv_never_differs_from_the_general_path(rows, newline, dtype):
    _bulk_matches_the_general_path(rows, newline, dtype)


_integer_cells = st.one_of(
    st.integers(-2**63, 2**63 - 1).map(str),
    st.integers(0, 300).map(lambda v: f"+{v:03d}"),
    st.sampled_from(["-0", "+0", "00", "-", "+", "2**8", "1e2", "3.0"]),
    st.text(alphabet="0123456789+-", min_size=0, max_size=6),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(_integer_cells, min_size=3, max_size=3), min_size=1, max_size=6),
       st.sampled_from(["\n", "\r\n"]), st.sampled_from(["int8", "int32", "int64", "uint8", "uint64"]))
def test_bulk_integer_csv_never_differs_from_the_general_path(rows, newline, dtype):
    _bulk_matches_the_general_path(rows, newline, dtype)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
                             lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
                             max_leaves=8), min_size=1, max_size=5))
def test_bulk_json_lines_read_as_the_standard_library_does(values):
    body = b"\n".join(json.dumps(v).encode() for v in values) + b"\n"
    expected = [json.loads(line) for line in body.decode().splitlines() if line.strip()]
    assert json_request(body, "application/jsonlines") == {"instances": expected}


def test_json_lines_the_bulk_path_leaves_alone_still_parse():
    body = b'[NaN, 1]\n[18446744073709551616]\n["\\ud800"]\r\n{"a": 1}\xe2\x80\xa8[2]\n'
    instances = json_request(body, "application/jsonlines")["instances"]
    assert instances[1:] == [[18446744073709551616], ["\ud800"], {"a": 1}, [2]]
    assert np.isnan(instances[0][0])


@settings(max_examples=300, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
                    max_leaves=8))
def test_bulk_json_reads_as_the_standard_library_does(value):
    body = json.dumps(value).encode()
    expected = json.loads(body)
    if isinstance(expected, dict) and {"instances", "inputs", "examples"} & set(expected):
        wrapped = expected
    elif isinstance(expected, list) and expected and isinstance(expected[0], list):
        wrapped = {"instances": expected}  # "[[": already the list of instances
    else:
        wrapped = {"instances": [expected]}
    assert typed(json_request(body, "application/json")) == typed(wrapped)


@pytest.mark.parametrize("number", [-9223372036854775809, -(10 ** 19), 18446744073709551616, 10 ** 30])
@pytest.mark.parametrize("media", ["application/json", "application/jsonlines"])
def test_integers_beyond_64_bits_stay_integers(number, media):
    # orjson reads an integer outside [-2**63, 2**64) as a float, 19 digits already for a
    # negative one: the bulk paths must leave such a body to the standard library.
    body = json.dumps({"instances": [[number, 1.5]]}).encode()
    request = json_request(body, media)
    rows = request["instances"] if media == "application/json" else request["instances"][0]["instances"]
    assert typed(rows) == typed([[number, 1.5]])


def test_json_the_bulk_path_leaves_alone_still_parses():
    assert np.isnan(json_request(b"[NaN, 1]", "application/json")["instances"][0][0])
    assert json_request(b'["\\ud800"]', "application/json") == {"instances": [["\ud800"]]}
    with pytest.raises(InvalidInput, match="not valid UTF-8"):
        json_request(b'["\xff"]', "application/json")


@pytest.mark.parametrize("as_text", [False, True])
def test_jsonenc_loads_keeps_long_integers_in_text_and_bytes(as_text):
    # What the REST server and a handler's returned body go through (runtime.jsonenc.loads).
    from tfbatch.runtime import jsonenc

    body = '{"instances": [[-9223372036854775809, 0.25, 12]]}'
    value = jsonenc.loads(body if as_text else body.encode())
    assert typed(value) == typed(json.loads(body))
