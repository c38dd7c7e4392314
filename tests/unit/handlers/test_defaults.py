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


def test_json_lines_become_instances():
    body = b'[1, 2]\n\n{"x": 3}\n'
    assert json_request(body, "application/jsonlines") == {"instances": [[1, 2], {"x": 3}]}


def test_csv_rows_become_numeric_instances():
    body = b"1,2.5,abc\n\n4,5,6\n"
    assert json_request(body, "text/csv") == {"instances": [[1, 2.5, "abc"], [4, 5, 6]]}
    assert json_request(b"7\n8\n", "text/csv") == {"instances": [7, 8]}


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
