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


# ---- a MultiRecord payload's CSV join in one pass writes what the row-by-row join writes ----

def _row_by_row(dp, rows, response):
    """What the pipeline writes for each row without the one-pass join: the response split per
    record (records/payloads.py), each part joined with its row; an error in its row's place."""
    from tfbatch.records import Payload, Record
    from tfbatch.records.payloads import split_multi_response

    payload = Payload([Record(index=i, offset=0, data=r, raw=r + b"\n") for i, r in enumerate(rows)], b"\n".join(rows))
    parts = split_multi_response(payload, response)
    if parts is None:
        return None  # answered as a whole, or record by record
    out = []
    for row, part in zip(rows, parts):
        try:
            out.append(dp.process_output(row, part))
        except InvalidInput as exc:
            out.append(type(exc))
    return out


_ANSWER_VALUES = (st.floats(allow_nan=True, allow_infinity=True) | st.integers(min_value=-2**70, max_value=2**70)
                  | st.booleans() | st.none() | st.text(max_size=3))
_ANSWER_ROWS = (st.lists(st.floats(allow_nan=False, allow_infinity=False, width=32), max_size=4)
                | st.floats(allow_nan=False, allow_infinity=False)
                | st.integers(min_value=-2**66, max_value=2**66)
                | st.lists(_ANSWER_VALUES, max_size=3)
                | st.lists(st.lists(st.floats(allow_nan=False), max_size=2), max_size=2))


@settings(max_examples=400, deadline=None)
@given(
    rows=st.lists(st.lists(st.text(alphabet='0123456789.-abé"\xff', min_size=1, max_size=5), min_size=1, max_size=4)
                  .map(lambda cells: ",".join(cells).encode("utf-8", "surrogateescape")), min_size=2, max_size=5),
    answers=st.data(),
    path=st.sampled_from([None, "$[0]", "$[-1]", "$[0,-1:]", "$[1:]", "$[0,2:3]", "$[*]", "$[5]"]),
    key=st.sampled_from(["predictions", "results"]),
)
def test_csv_join_of_a_whole_payload_writes_what_joining_row_by_row_writes(rows, answers, path, key):
    dp = DataProcessor(None, path, "Input", "text/csv", None)
    rows = [r.replace(b"\xc3\xbf", b"\xff") for r in rows]  # some rows not UTF-8
    answer_rows = answers.draw(st.lists(_ANSWER_ROWS, min_size=len(rows), max_size=len(rows)))
    response = json.dumps({key: answer_rows}).encode()
    fast = dp.join_payload(rows, response)
    expected = _row_by_row(dp, rows, response)
    if fast is not None:
        assert expected is not None
        assert [o if type(o) is bytes else type(o) for o in fast] == expected


def test_csv_join_of_a_whole_payload_takes_the_common_answers():
    dp = DataProcessor("$[1:]", "$[0,-2:]", "Input", "text/csv", None)
    rows = [b"a,1,2", b"b,3,4", b"c,5,6"]
    flat = b'{"predictions":[[0.25,1e-05],[2,3.5],[0.0,-1.0]]}'
    assert dp.join_payload(rows, flat) == [b"a,0.25,1e-05", b"b,2,3.5", b"c,0.0,-1.0"]
    scalars = b'{"predictions":[0.5,1,2.5]}'
    assert dp.join_payload(rows, scalars) == [b"a,2,0.5", b"b,4,1", b"c,6,2.5"]
    whole = DataProcessor(None, None, "Input", "text/csv", "application/json")
    assert whole.join_payload(rows, b'{"predictions":[[1],[],[2]]}') == [b"a,1,2,1", b"b,3,4", b"c,5,6,2"]
    # A filter that misses a row: that row's error, the others written.
    short = DataProcessor(None, "$[4]", "Input", "text/csv", None)
    out = short.join_payload([b"a,1,2", b"b"], b'{"predictions":[[7,8],[9,10]]}')
    assert out[0] == b"8" and isinstance(out[1], InvalidInput)


@pytest.mark.parametrize("rows, response", [
    ([b"a,1", b'"b",2'], b'{"predictions":[[1],[2]]}'),            # a quoted row
    ([b"a,1", b"b,\xff"], b'{"predictions":[[1],[2]]}'),           # a row that is not UTF-8
    ([b"a,1", b"b,2"], b'{"predictions":[[1],[2]],"model":"m"}'),  # more than the rows
    ([b"a,1", b"b,2"], b'{"predictions":[[1]]}'),                   # fewer rows
    ([b"a,1", b"b,2"], b'{"predictions":[[NaN],[2]]}'),             # TF Serving's NaN
    ([b"a,1", b"b,2"], b'{"outputs":[[1],[2]]}'),                   # columnar: not split per row
    ([b"a,1", b"b,2"], b"1\n2\n"),                                  # not JSON
])
def test_csv_join_of_a_whole_payload_leaves_the_rest_to_the_rows(rows, response):
    assert DataProcessor(None, None, "Input", "text/csv", None).join_payload(rows, response) is None


@settings(max_examples=300, deadline=None)
@given(
    rows=st.lists(st.lists(st.text(alphabet="0123456789.-abé", min_size=1, max_size=5), min_size=1, max_size=4)
                  .map(lambda cells: ",".join(cells).encode()), min_size=2, max_size=6),
    answers=st.data(),
    path=st.sampled_from([None, "$[0]", "$[-1]", "$[0,-1:]", "$[1:]", "$[5]"]),
    scalar=st.booleans(),
)
def test_csv_join_of_a_payload_of_numbers_is_one_pass_and_writes_the_same(rows, answers, path, scalar):
    dp = DataProcessor(None, path, "Input", "text/csv", None)
    numbers = st.floats(allow_nan=False, allow_infinity=False) | st.integers(min_value=-2**63, max_value=2**63 - 1)
    answer = numbers if scalar else st.lists(numbers, max_size=4)
    response = json.dumps({"predictions": answers.draw(st.lists(answer, min_size=len(rows), max_size=len(rows)))}).encode()
    fast = dp.join_payload(rows, response)
    assert fast is not None
    assert [o if type(o) is bytes else type(o) for o in fast] == _row_by_row(dp, rows, response)


@settings(max_examples=300, deadline=None)
@given(
    rows=st.lists(st.lists(st.text(alphabet='0123456789.-ab"\r é', max_size=4), min_size=1, max_size=5)
                  .map(lambda cells: ",".join(cells)), min_size=1, max_size=6),
    path=st.sampled_from(["$[1:]", "$[0]", "$[0,-1]", "$[-2:]", "$[4]", "$[*]", "$[:0]"]),
    trailing=st.booleans(),
)
def test_csv_input_filter_of_a_payload_picks_what_each_row_alone_gives(rows, path, trailing):
    from tfbatch.records.join import _dump_csv, _load_csv
    from tfbatch.records.jsonpath import compile_path

    payload = "\n".join(rows).encode() + (b"\n" if trailing else b"")
    dp = DataProcessor(path, None, None, "text/csv", None)
    units = [u for u in (ln[:-1] if ln.endswith(b"\r") else ln for ln in payload.split(b"\n")) if u] or [b""]
    try:
        picked = [_dump_csv(compile_path(path).apply(_load_csv(u))) for u in units]
        expected = picked[0] if len(picked) == 1 else b"\n".join(picked) + (b"\n" if payload.endswith(b"\n") else b"")
    except InvalidInput:
        expected = InvalidInput
    try:
        got = dp.filter_input(payload)
    except InvalidInput:
        got = InvalidInput
    if expected is InvalidInput or got is InvalidInput:
        assert got is expected
    else:
        assert got == expected


_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=False) | st.integers(min_value=-2**70, max_value=2**70)
    | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=6)


@settings(max_examples=300, deadline=None)
@given(
    rows=st.lists(_JSON_VALUES.map(lambda v: json.dumps(v).encode()) | st.sampled_from([b"{", b"\r", b"[1]\r", b"x"]),
                  min_size=2, max_size=5),
    answers=st.data(),
    content_type=st.sampled_from(["application/jsonlines", "application/json"]),
    accept=st.sampled_from([None, "application/json", "application/jsonlines", "text/csv"]),
    path=st.sampled_from([None, "$.id", "$['id','SageMakerOutput']", "$.SageMakerOutput", "$[0]", "$.*"]),
)
def test_json_join_of_a_whole_payload_writes_what_joining_row_by_row_writes(rows, answers, content_type, accept, path):
    dp = DataProcessor(None, path, "Input", content_type, accept)
    response = json.dumps({"predictions": answers.draw(st.lists(_JSON_VALUES, min_size=len(rows), max_size=len(rows)))}).encode()
    fast = dp.join_payload(rows, response)
    expected = _row_by_row(dp, rows, response)
    if expected is not None and b"NaN" not in response and b"Infinity" not in response \
            and not (content_type == "application/jsonlines" and any(r in (b"\r",) for r in rows)):
        assert fast is not None
    if fast is not None:
        assert [o if type(o) is bytes else type(o) for o in fast] == expected


@settings(max_examples=300, deadline=None)
@given(
    cells=st.lists(st.text(alphabet="0123456789.-ab", max_size=4), min_size=1, max_size=12),
    path=st.sampled_from(["$[1:]", "$[3:]", "$[9:]", "$[:0]", "$[:2]", "$[:8]", "$[:9]", "$[2:4]", "$[0]",
                          "$[-1]", "$[0,-1]", "$[*]", "$[0:]", "$[1:-1]", "$[-3:]"]),
)
def test_a_plain_rows_picks_cut_from_its_bytes_are_its_cells_picked(cells, path):
    from tfbatch.records.join import _CsvPicks
    from tfbatch.records.jsonpath import compile_path

    row = ",".join(cells).encode()
    picks = _CsvPicks(compile_path(path))
    try:
        expected = picks.pick(row.split(b","))
    except InvalidInput:
        with pytest.raises(InvalidInput):
            picks.pick_row(row)
        return
    assert picks.pick_row(row) == expected


@settings(max_examples=300, deadline=None)
@given(
    cells=st.lists(st.text(alphabet="0123456789.-ab", max_size=4), min_size=1, max_size=12),
    answer=st.lists(st.text(alphabet="0123456789.-e", max_size=4), min_size=1, max_size=12),
    path=st.sampled_from(["$[0,-10:]", "$[0,-1:]", "$[0,1,-2:]", "$[:2,-3:]", "$[-4:]", "$[:9]", "$[0,-9:]",
                          "$[0]", "$[-1]", "$[1:]", "$[*]", "$[0,0]", "$[:3,1:]", "$[:0]", "$[0,2:4]"]),
)
def test_a_joined_rows_picks_cut_from_its_bytes_are_its_cells_picked(cells, answer, path):
    from tfbatch.records.join import _CsvPicks
    from tfbatch.records.jsonpath import compile_path

    row, tail = ",".join(cells).encode(), ",".join(answer).encode()
    picks = _CsvPicks(compile_path(path))
    try:
        expected = picks.pick(row.split(b",") + tail.split(b","))
    except InvalidInput:
        with pytest.raises(InvalidInput):
            picks.pick_joined(row, tail)
        return
    assert picks.pick_joined(row, tail) == expected
    assert picks.pick_joined(row, tail) == expected  # the cut remembered for these widths


@pytest.mark.parametrize("response", [
    b'{"predictions":[["x"],[2]]}',          # text
    b'{"predictions":[[[1]],[2]]}',          # nested
    b'{"results":[["a,b",null],[true,2]]}',  # text that needs quoting, null, a boolean
])
def test_csv_join_of_a_payload_of_other_answers_joins_each_row_as_alone(response):
    for path in (None, "$[0,-1]", "$[5]"):
        dp = DataProcessor(None, path, "Input", "text/csv", None)
        rows = [b"a,1", b"b,2"]
        fast = dp.join_payload(rows, response)
        assert fast is not None
        assert [o if type(o) is bytes else type(o) for o in fast] == _row_by_row(dp, rows, response)


@settings(max_examples=300, deadline=None)
@given(
    features=st.lists(st.floats(allow_nan=False, allow_infinity=False) | st.integers(-2**70, 2**70)
                      | st.text(max_size=3) | st.sampled_from(["\u2028", "\x85", "\u00e9"]) | st.none()
                      | st.booleans(), max_size=6),
    nan=st.booleans(),
)
def test_json_input_filter_sends_the_values_the_exact_path_sends(features, nan):
    """A JSON Lines InputFilter writes what orjson read with orjson (any spelling of the same
    values); a row only the standard library reads (NaN, a long integer) the exact way. The
    model is sent the same values either way."""
    from tfbatch.runtime import jsonenc

    row = {"id": "a\u00e9", "features": features + ([float("nan")] if nan else [])}
    line = json.dumps(row).encode()
    dp = DataProcessor("$.features", None, None, "application/jsonlines", None)
    sent = dp.filter_input(line)
    exact = jsonenc.compact_dumps(json.loads(line)["features"])
    if nan:
        assert sent == exact  # only the standard library reads NaN: written the exact way
    else:
        assert json.loads(sent) == json.loads(exact)
    assert sent.isascii()  # a raw U+2028 or NEL would split the row for the JSON Lines reader
    line_break = dp.filter_input(json.dumps({"features": ["a\u2028b", "\x85"]}, ensure_ascii=False).encode())
    assert line_break == b'["a\\u2028b","\\u0085"]'


@settings(max_examples=300, deadline=None)
@given(
    rows=st.lists(st.dictionaries(st.sampled_from(["id", "features", "a"]), _JSON_VALUES, max_size=3)
                  .map(lambda v: json.dumps(v, ensure_ascii=False).encode())
                  | _JSON_VALUES.map(lambda v: json.dumps(v).encode())
                  | st.sampled_from([b"{", b"x", b'{"features":[1]}\r', b'{"features":NaN}',
                                     b'{"features":"\\u2028"}', b'{"features":123456789012345678901}']),
                  min_size=2, max_size=6),
    path=st.sampled_from(["$.features", "$.id", "$['id','features']", "$[0]", "$.*", "$.features[1:]"]),
    trailing=st.booleans(),
)
def test_json_input_filter_of_a_payload_sends_what_each_row_alone_sends(rows, path, trailing):
    """A MultiRecord payload of JSON Lines is filtered once for all its rows where that gives
    the same bytes as filtering each row alone; a row that fails fails the payload as alone."""
    dp = DataProcessor(path, None, None, "application/jsonlines", None)
    payload = b"\n".join(rows) + (b"\n" if trailing else b"")
    units = [u for u in (ln[:-1] if ln.endswith(b"\r") else ln for ln in payload.split(b"\n")) if u]
    try:
        alone = [dp.filter_input(u) for u in units]
    except InvalidInput:
        with pytest.raises(InvalidInput):
            dp.filter_input(payload)
        return
    expected = alone[0] if len(alone) == 1 else b"\n".join(alone) + (b"\n" if trailing else b"")
    assert dp.filter_input(payload) == expected


@settings(max_examples=300, deadline=None)
@given(
    rows=st.lists(st.fixed_dictionaries({"features": _JSON_VALUES},
                                        optional={"id": _JSON_VALUES, "SageMakerOutput": _JSON_VALUES, "b": _JSON_VALUES})
                  .map(lambda v: json.dumps(v).encode()),
                  min_size=2, max_size=6)
    | st.lists(st.dictionaries(st.sampled_from(["id", "features", "SageMakerOutput", "b"]), _JSON_VALUES, max_size=4)
               .map(lambda v: json.dumps(v).encode())
               | _JSON_VALUES.map(lambda v: json.dumps(v).encode())
               | st.sampled_from([b"{", b'{"features":[1]}\r', b'{"features":NaN}', b'{"id":123456789012345678901}']),
               min_size=2, max_size=6),
    answers=st.data(),
    in_path=st.sampled_from(["$.features", "$['id','features']", "$.*"]),
    out_path=st.sampled_from(["$.id", "$['id','SageMakerOutput']", "$.SageMakerOutput", "$['SageMakerInput']",
                              "$['b','id','missing']", "$.missing"]),
)
def test_json_join_of_what_the_input_filter_kept_writes_what_reading_each_row_writes(rows, answers, in_path, out_path):
    """Where the InputFilter read every row of a JSON Lines payload, it keeps the keys the
    OutputFilter may pick, and the join works from those: the same bytes as the join that reads
    each row (errors included), which the test also holds to the row-by-row join."""
    dp = DataProcessor(in_path, out_path, "Input", "application/jsonlines", None)
    response = json.dumps({"predictions": answers.draw(st.lists(_JSON_VALUES, min_size=len(rows), max_size=len(rows)))}).encode()
    payload = b"\n".join(rows) + b"\n"
    try:
        body, kept = dp.filter_keeping(payload)
    except InvalidInput:
        with pytest.raises(InvalidInput):
            dp.filter_input(payload)
        return
    assert body == dp.filter_input(payload)
    records = [r[:-1] if r.endswith(b"\r") else r for r in rows]
    fast = dp.join_payload(records, response, kept)
    assert fast is not None or dp.join_payload(records, response) is None
    if fast is None:
        return
    assert [o if type(o) is bytes else str(o) for o in fast] == [
        o if type(o) is bytes else str(o) for o in dp.join_payload(records, response)]
    as_types = [o if type(o) is bytes else type(o) for o in fast]
    if b"NaN" not in response and b"Infinity" not in response:
        assert as_types == _row_by_row(dp, records, response)
    if kept is not None:  # every row was read: what the OutputFilter's keys pick of each
        from tfbatch.records.jsonpath import compile_path

        keys = compile_path(out_path).top_keys
        read = [json.loads(r) for r in rows]
        assert kept == [{k: v[k] for k in keys if k in v} if isinstance(v, dict)
                        else (v if "SageMakerInput" in keys else None) for v in read]


def test_the_input_filter_keeps_only_the_keys_the_join_picks():
    dp = DataProcessor("$.features", "$['id','SageMakerOutput']", "Input", "application/jsonlines", None)
    rows = [b'{"id":"a","features":[1.5,2]}', b'{"features":[3],"id":7,"x":1}', b"[4]"]
    body, kept = dp.filter_keeping(b"\n".join(rows[:2]) + b"\n")
    assert body == b"[1.5,2]\n[3]\n" and kept == [{"id": "a"}, {"id": 7}]
    out = dp.join_payload(rows[:2], b'{"predictions":[[0.5],[0.25]]}', kept)
    assert out == [b'{"id":"a","SageMakerOutput":{"predictions":[[0.5]]}}',
                   b'{"id":7,"SageMakerOutput":{"predictions":[[0.25]]}}']
    # A row that is no object: the InputFilter fails on it, so nothing is kept for the payload.
    with pytest.raises(InvalidInput):
        dp.filter_keeping(b"\n".join(rows))
    # Rows that are no objects are joined as SageMakerInput: kept whole only where that is picked.
    arrays = [b"[1,2]", b"[3]"]
    picks_input = DataProcessor("$[0]", "$['SageMakerInput','SageMakerOutput']", "Input", "application/jsonlines", None)
    body, kept = picks_input.filter_keeping(b"\n".join(arrays))
    assert body == b"1\n3" and kept == [[1, 2], [3]]
    assert picks_input.join_payload(arrays, b'{"predictions":[5,6]}', kept) == [
        b'{"SageMakerInput":[1,2],"SageMakerOutput":{"predictions":[5]}}',
        b'{"SageMakerInput":[3],"SageMakerOutput":{"predictions":[6]}}']
    picks_output = DataProcessor("$[0]", "$.SageMakerOutput", "Input", "application/jsonlines", None)
    body, kept = picks_output.filter_keeping(b"\n".join(arrays))
    assert kept == [None, None]
    assert picks_output.join_payload(arrays, b'{"predictions":[5,6]}', kept) == [
        b'{"predictions":[5]}', b'{"predictions":[6]}']
    # Nothing kept where the join needs whole rows, or where the filter reads none.
    assert DataProcessor("$.features", None, "Input", "application/jsonlines", None).filter_keeping(
        b"\n".join(rows[:2]))[1] is None
    assert DataProcessor(None, "$.id", "Input", "application/jsonlines", None).filter_keeping(
        b"\n".join(rows[:2]))[1] is None
