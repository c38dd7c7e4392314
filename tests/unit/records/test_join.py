"""DataProcessing: InputFilter, JoinSource=Input and OutputFilter per content type."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tfbatch.errors import InvalidInput, ConfigError
from tfbatch.records import DataProcessor, content_kind


def test_content_kinds():
    assert content_kind("text/csv; charset=utf-8") == "csv"
    assert content_kind("application/json") == "json"
    assert content_kind("application/jsonlines") == "jsonlines"
    assert content_kind("application/x-image") is None


def test_defaults_pass_bytes_through_untouched():
    dp = DataProcessor(None, "$", "None", "application/x-image", "image/png")
    assert not dp.active
    assert dp.filter_input(b"\x89PNG") == b"\x89PNG"
    assert dp.process_output(b"\x89PNG", b"\x00raw") == b"\x00raw"


# ---- CSV ------------------------------------------------------------------------


def test_csv_id_column_excluded_then_joined_back():
    # the developer guide's example: InputFilter $[1:], JoinSource Input, OutputFilter $
    dp = DataProcessor("$[1:]", "$", "Input", "text/csv", "text/csv")
    assert dp.filter_input(b"id7,1.5,2,3") == b"1.5,2,3"
    assert dp.process_output(b"id7,1.5,2,3", b"0.93\n") == b"id7,1.5,2,3,0.93"


def test_csv_output_filter_keeps_id_and_prediction():
    dp = DataProcessor("$[1:]", "$[0,-1]", "Input", "text/csv", "text/csv")
    assert dp.process_output(b"id7,1,2,3", b"1") == b"id7,1"


def test_csv_join_guide_example():
    # "if the record is [1,2,3], and the label result is [1], then the output ... [1,2,3,1]"
    dp = DataProcessor(None, None, "Input", "text/csv", "text/csv")
    assert dp.process_output(b"1,2,3", b"1") == b"1,2,3,1"


def test_csv_quoting_survives():
    dp = DataProcessor("$[1:]", None, "Input", "text/csv", "text/csv")
    assert dp.filter_input(b'"a,b",x,"say ""hi"""') == b'x,"say ""hi"""'
    assert dp.process_output(b'"a,b",x', b"0.5,0.5") == b'"a,b",x,0.5,0.5'


def test_csv_join_with_tfs_json_answer_appends_the_row():
    dp = DataProcessor("$[1:]", None, "Input", "text/csv", "application/json")
    out = dp.process_output(b"id7,1,2", b'{"predictions": [[0.25, 0.75]]}')
    assert out == b"id7,1,2,0.25,0.75"


def test_csv_whole_object_rows_processed_row_by_row():
    dp = DataProcessor("$[1:]", "$[0,-1]", "Input", "text/csv", "text/csv")
    assert dp.filter_input(b"a,1,2\nb,3,4\n") == b"1,2\n3,4\n"
    assert dp.process_output(b"a,1,2\nb,3,4\n", b"0\n1\n") == b"a,0\nb,1\n"
    with pytest.raises(InvalidInput, match="2 rows but the output has 3 lines"):
        dp.process_output(b"a,1,2\nb,3,4\n", b"0\n1\n2\n")


def test_csv_paths_must_be_index_paths():
    with pytest.raises(ConfigError, match="CSV rows are arrays"):
        DataProcessor("$.features", None, None, "text/csv", "text/csv")
    with pytest.raises(ConfigError, match="OutputFilter"):
        DataProcessor(None, "$['id','SageMakerOutput']", "Input", "text/csv", "text/csv")


def test_csv_out_of_range_output_filter_is_an_error():
    dp = DataProcessor(None, "$[0,9]", "Input", "text/csv", "text/csv")
    with pytest.raises(InvalidInput, match="index 9 is outside an array of 4 elements"):
        dp.process_output(b"1,2,3", b"1")


# ---- JSON -----------------------------------------------------------------------


def test_json_object_gets_sagemaker_output_key():
    dp = DataProcessor("$.features", "$['id','SageMakerOutput']", "Input", "application/json", "application/json")
    record = b'{"id": 3, "features": [1, 2], "note": "x"}'
    assert json.loads(dp.filter_input(record)) == [1, 2]
    out = dp.process_output(record, b'{"predictions": [0.9]}')
    assert json.loads(out) == {"id": 3, "SageMakerOutput": {"predictions": [0.9]}}


def test_json_guide_example_key_and_label():
    dp = DataProcessor(None, None, "Input", "application/json", "application/json")
    assert json.loads(dp.process_output(b'{"key":1}', b'{"label":1}')) == {"key": 1, "SageMakerOutput": {"label": 1}}


def test_json_array_input_is_wrapped():
    dp = DataProcessor(None, None, "Input", "application/json", "application/json")
    out = dp.process_output(b"[1, 2, 3]", b"[0.5]")
    assert json.loads(out) == {"SageMakerInput": [1, 2, 3], "SageMakerOutput": [0.5]}
    out = dp.process_output(b'"just text"', b"7")
    assert json.loads(out) == {"SageMakerInput": "just text", "SageMakerOutput": 7}


def test_json_join_joins_the_raw_input_not_the_filtered_one():
    dp = DataProcessor("$.features", None, "Input", "application/json", "application/json")
    out = json.loads(dp.process_output(b'{"id": 1, "features": [5]}', b"[1]"))
    assert out == {"id": 1, "features": [5], "SageMakerOutput": [1]}


def test_output_filter_without_join_applies_to_the_output():
    dp = DataProcessor(None, "$.predictions[0]", None, "application/json", "application/json")
    assert json.loads(dp.process_output(b"{}", b'{"predictions": [[1, 2]]}')) == [1, 2]


def test_bad_json_record_is_invalid_input():
    dp = DataProcessor("$.a", None, None, "application/json", "application/json")
    with pytest.raises(InvalidInput, match="input record is not valid JSON"):
        dp.filter_input(b"{not json")


# ---- JSON Lines -----------------------------------------------------------------


def test_json_lines_per_line():
    dp = DataProcessor("$.x", "$.SageMakerOutput", "Input", "application/jsonlines", "application/jsonlines")
    assert dp.filter_input(b'{"x": [1], "id": "a"}') == b"[1]"
    assert dp.process_output(b'{"x": [1], "id": "a"}', b'{"y": 2}\n') == b'{"y":2}'
    whole = b'{"x": 1}\n[2]\n'
    joined = DataProcessor(None, None, "Input", "application/jsonlines", "application/jsonlines").process_output(
        whole, b'"a"\n"b"\n'
    )
    assert [json.loads(line) for line in joined.splitlines()] == [
        {"x": 1, "SageMakerOutput": "a"},
        {"SageMakerInput": [2], "SageMakerOutput": "b"},
    ]


# ---- spec validation ------------------------------------------------------------


def test_filters_need_csv_or_json_content():
    with pytest.raises(ConfigError, match="needs ContentType text/csv, application/json or application/jsonlines; got 'application/x-image'"):
        DataProcessor("$[1:]", None, None, "application/x-image", None)
    with pytest.raises(ConfigError, match="needs Accept"):
        DataProcessor(None, None, "Input", "application/json", "image/png")
    with pytest.raises(ConfigError, match="JoinSource 'Both'"):
        DataProcessor(None, None, "Both", "text/csv", "text/csv")
    with pytest.raises(ConfigError, match="invalid JSONPath"):
        DataProcessor("$..x", None, None, "application/json", None)


@settings(max_examples=100, deadline=None)
@given(
    cells=st.lists(st.text(alphabet=st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",))), min_size=2, max_size=6),
    picks=st.lists(st.integers(0, 1), min_size=1, max_size=3),
)
def test_csv_filter_round_trips_any_cells(cells, picks):
    from tfbatch.records.join import _dump_csv

    dp = DataProcessor(f"$[{','.join(map(str, picks))}]", None, None, "text/csv", None)
    line = _dump_csv(cells)
    expected = _dump_csv([cells[i] for i in picks])
    assert dp.filter_input(line) == expected
    # and the joined row parses back to the input cells followed by the output's
    joined = DataProcessor(None, None, "Input", "text/csv", "text/csv").process_output(line, b"0.5")
    assert DataProcessor("$[:-2]", None, None, "text/csv", None).filter_input(joined) == line


# ---- the join's fast paths write what the general rule writes -----------------------

_ROW_NUMBERS = st.floats(allow_nan=True, allow_infinity=True) | st.integers(min_value=-2**70, max_value=2**70)


@settings(max_examples=200, deadline=None)
@given(
    cells=st.lists(st.text(alphabet="0123456789.-abcXYZ é", min_size=1, max_size=8), min_size=1, max_size=6),
    prediction=st.lists(_ROW_NUMBERS, max_size=6),
)
def test_csv_join_of_a_plain_row_appends_the_answer_in_json_spelling(cells, prediction):
    row = ",".join(cells).encode()
    answer = json.dumps({"predictions": [prediction]}).encode()
    joined = DataProcessor(None, None, "Input", "text/csv", None).process_output(row, answer)
    expected = ",".join(cells + [json.dumps(v) for v in prediction])
    assert joined == expected.encode()


@settings(max_examples=200, deadline=None)
@given(
    record=st.lists(_ROW_NUMBERS, max_size=5) | st.dictionaries(st.text(max_size=4), _ROW_NUMBERS, max_size=3),
    prediction=st.lists(_ROW_NUMBERS, max_size=5),
)
def test_json_join_writes_compact_standard_json(record, prediction):
    raw = json.dumps(record).encode()
    answer = json.dumps({"predictions": [prediction]}).encode()
    joined = DataProcessor(None, None, "Input", "application/jsonlines", None).process_output(raw, answer)
    if isinstance(record, dict):
        expected = {**record, "SageMakerOutput": {"predictions": [prediction]}}
    else:
        expected = {"SageMakerInput": record, "SageMakerOutput": {"predictions": [prediction]}}
    assert joined == json.dumps(expected, separators=(",", ":")).encode()


def test_csv_join_of_a_row_that_is_not_utf8_names_it():
    with pytest.raises(InvalidInput, match="CSV row is not UTF-8"):
        DataProcessor(None, None, "Input", "text/csv", None).process_output(b"1,\xff", b'{"predictions":[[0.5]]}')


def test_csv_join_answer_with_text_or_empty_columns():
    dp = DataProcessor(None, None, "Input", "text/csv", None)
    assert dp.process_output(b"7,8", b'{"predictions":[[0.5,"a,b",null]]}') == b'7,8,0.5,"a,b",'
    assert dp.process_output(b"7,8", b'{"predictions":[]}') == b"7,8"
    assert dp.process_output(b"7,8", b'{"predictions":[[1e-7,[1,2]]]}') == b'7,8,1e-07,"[1, 2]"'


@settings(max_examples=200, deadline=None)
@given(
    cells=st.lists(st.text(alphabet="0123456789.-abcXYZ é", min_size=1, max_size=8), min_size=2, max_size=6),
    prediction=st.lists(_ROW_NUMBERS, min_size=1, max_size=6),
    path=st.sampled_from(["$[0]", "$[-1]", "$[0,-1:]", "$[1:]", "$[0,2:3]", "$[*]", "$[:0]"]),
)
def test_csv_join_with_an_output_filter_picks_the_cells_of_the_joined_row(cells, prediction, path):
    from tfbatch.records.jsonpath import compile_path

    row = ",".join(cells).encode()
    answer = json.dumps({"predictions": [prediction]}).encode()
    joined = DataProcessor(None, path, "Input", "text/csv", None).process_output(row, answer)
    picked = compile_path(path).apply(cells + [json.dumps(v) for v in prediction])
    assert joined == (",".join(picked) if isinstance(picked, list) else picked).encode()


def test_csv_join_output_filter_picking_a_nested_answer_reads_it_as_a_row():
    # An array the filter picks alone is written as the row's cells, as before the fast path.
    dp = DataProcessor(None, "$[-1]", "Input", "text/csv", None)
    assert dp.process_output(b"7,8", b'[null, [1.5, 2]]') == b"1.5,2"
    assert dp.process_output(b"7,8", b'[null, []]') == b""
    assert DataProcessor(None, "$[-2]", "Input", "text/csv", None).process_output(b"7,8", b'[null, []]') == b""
