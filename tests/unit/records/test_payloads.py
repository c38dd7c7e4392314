"""BatchStrategy: payload forming under MaxPayloadInMB, and splitting responses back."""

from __future__ import annotations

import io
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tfbatch.errors import ConfigError, PayloadTooLarge, RecordError
from tfbatch.records import Payload, Record, form_payloads, iter_records, split_multi_response, write_tfrecord


def rec(i: int, data: bytes, raw: bytes | None = None, error=None) -> Record:
    return Record(i, i * 100, data, raw if raw is not None else data + b"\n", error)


def test_single_record_strips_framing():
    recs = list(iter_records(io.BytesIO(write_tfrecord([b"aa", b"bbb"])), "TFRecord"))
    payloads = list(form_payloads(recs, "SingleRecord", 6 * 1024 * 1024))
    assert [p.body for p in payloads] == [b"aa", b"bbb"]
    assert [p.records for p in payloads] == [[recs[0]], [recs[1]]]


def test_multi_record_keeps_framing():
    blob = write_tfrecord([b"aa", b"bbb", b"c"])
    recs = list(iter_records(io.BytesIO(blob), "TFRecord"))
    (payload,) = form_payloads(recs, "MultiRecord", None)
    assert payload.body == blob and payload.error is None


def test_oversized_record_isolated_with_named_error():
    recs = [rec(0, b"a" * 3), rec(1, b"b" * 50), rec(2, b"c" * 3)]
    out = list(form_payloads(recs, "MultiRecord", 10, source="s3://b/k"))
    assert [[r.index for r in p.records] for p in out] == [[0], [1], [2]]
    assert out[0].error is None and out[2].error is None
    assert isinstance(out[1].error, PayloadTooLarge)
    assert str(out[1].error).startswith("s3://b/k record 1 at byte 100: 51 bytes exceeds MaxPayloadInMB (10 bytes)")
    single = list(form_payloads(recs, "SingleRecord", 10))
    assert [p.error is None for p in single] == [True, False, True]


def test_error_record_never_shares_a_payload():
    bad = rec(1, b"", b"", RecordError("record 1 at byte 100: data CRC32C mismatch"))
    recs = [rec(0, b"a"), bad, rec(2, b"c"), rec(3, b"d")]
    out = list(form_payloads(recs, "MultiRecord", 0))
    assert [[r.index for r in p.records] for p in out] == [[0], [1], [2, 3]]
    assert out[1].error is bad.error and out[2].body == b"c\nd\n"


def test_strategy_names():
    assert list(form_payloads([rec(0, b"a")], "SINGLE_RECORD", None))[0].body == b"a"
    with pytest.raises(ConfigError, match="BatchStrategy 'Batch'"):
        form_payloads([], "Batch", None)


@settings(max_examples=100, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 30), max_size=25),
    limit=st.one_of(st.none(), st.just(0), st.integers(1, 60)),
    bad=st.sets(st.integers(0, 24)),
)
def test_multi_record_properties(sizes, limit, bad):
    recs = [
        rec(i, b"x" * n, error=RecordError("bad") if i in bad else None) for i, n in enumerate(sizes)
    ]
    out = list(form_payloads(iter(recs), "MultiRecord", limit))
    # order kept, every record exactly once, never split
    assert [r for p in out for r in p.records] == recs
    for p in out:
        if p.error is None:
            assert p.body == b"".join(r.raw for r in p.records)
            assert all(r.error is None for r in p.records)
            if limit:
                assert len(p.body) <= limit
        else:
            assert len(p.records) == 1
            r = p.records[0]
            assert r.error is not None or (limit and len(r.raw) > limit)
    # greedy: a good payload could not have taken the next good record
    if limit:
        for a, b in zip(out, out[1:]):
            if a.error is None and b.error is None:
                assert len(a.body) + len(b.records[0].raw) > limit


def test_split_json_predictions():
    payload = Payload([rec(0, b"a"), rec(1, b"b")], b"a\nb\n")
    parts = split_multi_response(payload, b'{"predictions": [[1, 2], [3, 4]]}')
    assert [json.loads(p) for p in parts] == [{"predictions": [[1, 2]]}, {"predictions": [[3, 4]]}]
    assert split_multi_response(payload, b'{"predictions": [[1, 2]]}') is None
    assert split_multi_response(payload, b'{"error": "boom"}') is None


def test_split_lines():
    payload = Payload([rec(0, b"a"), rec(1, b"b"), rec(2, b"c")], b"a\nb\nc\n")
    assert split_multi_response(payload, b"1\n2\r\n3\n") == [b"1\n", b"2\r\n", b"3\n"]
    assert split_multi_response(payload, b"1\n2\n3") == [b"1\n", b"2\n", b"3"]
    assert b"".join(split_multi_response(payload, b'{"a":1}\n{"a":2}\n{"a":3}\n')) == b'{"a":1}\n{"a":2}\n{"a":3}\n'
    assert split_multi_response(payload, b"1\n2\n") is None
    assert split_multi_response(payload, b"\x89PNG...") is None
    one = Payload([rec(0, b"a")], b"a\n")
    assert split_multi_response(one, b"anything\n\n") == [b"anything\n\n"]


def test_multi_record_line_payloads_are_whole_raw_lines():
    blob = b"1,2\r\n3,4\n5,6"
    recs = list(iter_records(io.BytesIO(blob), "Line"))
    out = list(form_payloads(recs, "MultiRecord", 9))
    assert [p.body for p in out] == [b"1,2\r\n3,4\n", b"5,6"]
    assert [p.body for p in form_payloads(recs, "SingleRecord", 9)] == [b"1,2", b"3,4", b"5,6"]


@pytest.mark.parametrize("rows", [
    [[0.1, 2.5e-07, -3.0], [1e300, 0, -0.0], [7, 8, 9]],
    [0.5, 1, -2.25],
    [[], [], []],
    [[1, [2]], [3, [4]], [5, [6]]],
    [["a"], ["b"], ["c"]],
    [{"x": 1}, {"x": 2}, {"x": 3}],
    [[1.0], [2.0], None],
    [True, False, None],
    [[1], [2**70], [1e300]],
])
def test_split_rows_are_each_row_encoded_alone(rows):
    from tfbatch.runtime import jsonenc

    payload = Payload([Record(i, i, b"r", b"r\n") for i in range(3)], b"r\nr\nr\n")
    response = jsonenc.dumps({"predictions": rows})
    # What encoding each parsed row alone gives (a SingleRecord answer's bytes).
    expected = [jsonenc.dumps({"predictions": [row]}) for row in jsonenc.loads(response)["predictions"]]
    assert split_multi_response(payload, response) == expected


# ---- join_single: SingleRecord lines many to a request ----------------------------------

from tfbatch.records import join_single  # noqa: E402
from tfbatch.records.payloads import joinable  # noqa: E402


def _singles(lines: list[bytes]) -> list[Record]:
    return [rec(i, line) for i, line in enumerate(lines)]


@pytest.mark.parametrize("kind", ["csv", "jsonl", "json"])
def test_join_single_joins_runs_in_order_and_leaves_the_rest(kind):
    good = b"[1,2.5]" if kind != "csv" else b"1,2.5"
    bad = b'"1",2' if kind == "csv" else b"[true,1]"
    lines = [good, good, bad, good, good, good]
    records = _singles(lines)
    records[5] = rec(5, good, error=RecordError("damaged"))
    out = list(join_single(records, kind))
    assert [[r.index for r in p.records] for p in out] == [[0, 1], [2], [3, 4], [5]]
    assert [p.joined for p in out] == [True, False, True, False]
    assert out[0].body == good + b"\n" + good and out[1].body == bad
    assert out[3].error is not None  # a damaged record is never joined
    # A run of JSON arrays sent as application/json goes as a JSON Lines body.
    assert out[0].content_type == ("application/jsonlines" if kind == "json" else None)
    assert out[1].content_type is None


def test_join_single_bounds_records_and_bytes():
    out = list(join_single(_singles([b"1,2"] * 10), "csv", max_records=4))
    assert [len(p.records) for p in out] == [4, 4, 2]
    out = list(join_single(_singles([b"1,2"] * 10), "csv", max_records=100, max_bytes=8))
    assert [len(p.records) for p in out] == [2, 2, 2, 2, 2]  # 3 bytes and a newline each
    # a record over MaxPayloadInMB fails as form_payloads fails it, between the runs
    out = list(join_single(_singles([b"1,2", b"3,4", b"1,2,3,4,5", b"1,2"]), "csv", limit=5, source="k"))
    assert [[r.index for r in p.records] for p in out] == [[0, 1], [2], [3]]
    assert isinstance(out[1].error, PayloadTooLarge) and "k" in str(out[1].error) and out[0].error is None
    (alone,) = join_single(_singles([b"1,2"]), "csv")
    assert not alone.joined and alone.body == b"1,2"
    with pytest.raises(ValueError):
        list(join_single(_singles([b"1"]), "tsv"))


@pytest.mark.parametrize("kind", ["csv", "jsonl"])
def test_join_single_sends_the_rows_it_filtered_to_judge_them(kind):
    """With an InputFilter the rows are filtered once, to judge them joinable; the joined request
    carries those rows (``sent``), byte for byte what the filter makes of the joined body."""
    from tfbatch.records.join import DataProcessor

    content_type, path = ("text/csv", "$[1:]") if kind == "csv" else ("application/jsonlines", "$.x")
    processor = DataProcessor(path, None, None, content_type, None)
    rows = [b"a,1.5,2", b"b,3,4e2", b"c,-1,0.25"] if kind == "csv" else \
        [b'{"id": "a", "x": [1.5, 2]}', b'{"id": "b", "x": [3, 400.0]}', b'{"id": "c", "x": [-1, 0.25]}']
    calls = []

    def sent_as(body: bytes) -> bytes:
        calls.append(body)
        return processor.filter_input(body)

    (joined,) = join_single(_singles(rows), kind, sent_as=sent_as)
    assert joined.joined and joined.body == b"\n".join(rows)
    assert joined.sent == processor.filter_input(joined.body)
    assert joined.sent == (b"1.5,2\n3,4e2\n-1,0.25" if kind == "csv" else b"[1.5,2]\n[3,400.0]\n[-1,0.25]")
    assert calls == [joined.body]  # filtered once, all rows in one call
    calls.clear()
    (first, second) = join_single(_singles(rows + [b""]), kind, sent_as=sent_as)
    assert first.joined and first.sent == joined.sent and not second.joined
    assert calls == rows  # a blank row spoils its group: the rows are judged one by one
    (alone,) = join_single(_singles(rows[:1]), kind, sent_as=sent_as)
    assert not alone.joined and alone.sent == processor.filter_input(rows[0])
    assert [p.sent for p in join_single(_singles(rows), kind)] == [None]  # no filter: nothing kept


def test_a_row_that_is_not_utf8_is_not_joined_under_a_filter():
    """The filter reads a joined CSV request's rows as UTF-8 text; a row that is not goes alone."""
    from tfbatch.records.join import DataProcessor

    processor = DataProcessor("$[1:]", None, None, "text/csv", None)
    rows = [b"a,1", b"\xff\xfe,2", b"c,3"]
    out = list(join_single(_singles(rows), "csv", sent_as=processor.filter_input))
    assert [[r.index for r in p.records] for p in out] == [[0], [1], [2]]
    assert out[1].sent is None and not out[1].joined
    out = list(join_single(_singles(rows), "csv"))  # unfiltered, the bytes go as they are
    assert [[r.index for r in p.records] for p in out] == [[0, 1, 2]]


@pytest.mark.parametrize(("data", "kind", "expected"), [
    (b"1.5,-2,3e4", "csv", True),
    (b"0.12345678901234568,1", "csv", True),       # 17 digits after the point: a float
    (b"12345678901234567,1.5", "csv", False),      # a 17-digit integer beside a float changes
    (b"-1234567890123456", "csv", False),
    (b"1234567890123456.5,1", "csv", True),
    (b'"a,b",1', "csv", False),                     # a quote may run across lines
    (b"1,2\r", "csv", False),
    (b"1,2\n3,4", "csv", False),                   # a newline of its own: two rows where one is expected
    (b"", "csv", False),
    (b"   ", "csv", False),                         # blank: would shorten the joined answer
    (b" , ,", "csv", False),
    (b"\t", "jsonl", False),
    (b"[1, 2]", "jsonl", True),
    (b'{"a": [1, 2]}', "jsonl", True),
    (b"[true, 1]", "jsonl", False),                 # a boolean beside numbers becomes a number
    (b"[1,\x0c2]", "jsonl", False),                 # str.splitlines() breaks there
    ("[1,\u2028 2]".encode(), "jsonl", False),
    (b"[12345678901234567]", "jsonl", False),
    (b"  [1, 2]", "json", True),
    (b"[ [1, 2], [3, 4]]", "json", False),          # two brackets: a list of instances, not one
    (b"[[1, 2], [3, 4]]", "jsonl", True),           # a JSON Lines line is one instance whatever it holds
    (b'{"instances": [[1, 2]]}', "json", False),    # may carry many rows of its own
    (b'{"x": [1, 2]}', "json", True),               # named inputs: one instance
    (b'{"x": [1, 2], "inputs": 1}', "json", False),
    (b'{"\\u0069nstances": [[1, 2]]}', "json", False),  # "instances", escaped
    (b"1.5", "json", False),
])
def test_joinable(data, kind, expected):
    assert joinable(data, kind) is expected


def test_a_joined_answer_with_nan_is_cut_from_its_own_text():
    from tfbatch.records.framing import Record
    from tfbatch.records.payloads import Payload, split_multi_response

    records = [Record(i, 0, b"x", b"x") for i in range(3)]
    payload = Payload(records, b"x\nx\nx", joined=True)
    parts = split_multi_response(payload, b'{"predictions":[[0.1,2.5e-8],[NaN,1.0],[-Infinity,3.0]]}')
    assert parts == [b'{"predictions":[[0.1,2.5e-8]]}', b'{"predictions":[[NaN,1.0]]}',
                     b'{"predictions":[[-Infinity,3.0]]}']
    flat = split_multi_response(payload, b'{"predictions":[0.5,NaN,Infinity]}')
    assert flat == [b'{"predictions":[0.5]}', b'{"predictions":[NaN]}', b'{"predictions":[Infinity]}']
    # an answer in another layout that holds NaN is not cut (re-encoding would write null)
    assert split_multi_response(payload, b'{"predictions": [[NaN, 1.0], [1, 2], [3, 4]]}') is None


@settings(max_examples=300, deadline=None)
@given(
    cells=st.lists(st.text(alphabet="0123456789.eE-+ a\"\r", max_size=20), min_size=1, max_size=6),
    path=st.sampled_from(["$[1:]", "$[0]", "$[-1]", "$[0,-1]", "$[:0]", "$[*]"]),
)
def test_a_filtered_csv_row_joins_when_the_filter_leaves_it_joinable(cells, path):
    # What a joinable row's InputFilter leaves is judged by a shorter test than joinable():
    # it must decide the same.
    from tfbatch.records import DataProcessor
    from tfbatch.records.payloads import _group_sent

    row = ",".join(cells).encode()
    dp = DataProcessor(path, None, None, "text/csv", None)
    sent = _group_sent(row, 1, "csv", dp.filter_input)
    if not joinable(row, "csv"):
        assert sent is None
        return
    try:
        filtered = dp.filter_input(row)
    except Exception:  # noqa: BLE001 - the filter refuses the row: it runs alone
        assert sent is None
        return
    assert sent == (filtered if joinable(filtered, "csv") else None)


_PIECES = ["1", "2.5", "-3e2", ",", " ", "\t", '"', "\r", "\x0c", "[", "]", "{", "}", "true", "12345678901234567",
           '"x": ', '"instances": ', "\u2028", "\xe9", "a", "\n"]
_GOOD = [b"1,2.5", b"a,1,-2e3", b"[1, 2.5]", b'{"x": [1, 2]}', b"  [3]", b'{"x": 1, "id": "b"}', b"4", b"b\xff,1,2"]


@settings(max_examples=400, deadline=None)
@given(
    lines=st.lists(st.one_of(st.sampled_from(_GOOD), st.sampled_from(_GOOD), st.lists(st.sampled_from(_PIECES),
                   max_size=6).map(lambda p: "".join(p).encode())), min_size=1, max_size=9),
    kind=st.sampled_from(["csv", "jsonl", "json"]),
    path=st.sampled_from([None, "$[1:]", "$[0]", "$.x", "$[*]"]),
    max_records=st.integers(1, 4),
)
def test_groups_judged_at_once_join_what_line_by_line_would(lines, kind, path, max_records):
    """A group judged on its joined bytes (``_all_joinable``, the filter once) joins exactly the
    lines, and sends exactly the rows, that each line's own test (``_group_sent`` of one line) gives."""
    from tfbatch.records.join import DataProcessor
    from tfbatch.records.payloads import _group_sent

    sent_as = None
    if path is not None:
        content_type = {"csv": "text/csv", "jsonl": "application/jsonlines", "json": "application/json"}[kind]
        if kind == "csv" and path == "$.x":
            path = "$[0]"
        sent_as = DataProcessor(path, None, None, content_type, None).filter_input
    out = list(join_single(_singles(lines), kind, max_records=max_records, sent_as=sent_as))
    assert [r.index for p in out for r in p.records] == list(range(len(lines)))
    own = [_group_sent(line, 1, kind, sent_as) for line in lines]
    for p in out:
        if p.joined:
            assert 1 < len(p.records) <= max_records
            assert p.body == b"\n".join(lines[r.index] for r in p.records)
            rows = [own[r.index] for r in p.records]
            assert None not in rows
            assert p.sent == (b"\n".join(rows) if sent_as else None)
        else:
            (record,) = p.records
            assert p.sent == (own[record.index] if sent_as else None)
    if None not in own:  # every line may join: groups of max_records, the last one shorter
        assert [len(p.records) for p in out] == [min(max_records, len(lines) - i)
                                                 for i in range(0, len(lines), max_records)]


@settings(max_examples=300, deadline=None)
@given(
    n=st.integers(2, 6),
    width=st.sampled_from([None, 0, 1, 3]),
    dtype=st.sampled_from(["float32", "float64", "int64", "bool"]),
    data=st.data(),
    line=st.booleans(),
)
def test_a_joined_answer_cut_at_once_is_each_records_own_answer(n, width, dtype, data, line):
    """``joined_outputs`` cuts the service's own answer to a joined request in one pass: each
    record's part is byte for byte the service's answer to that record's row alone (what
    SingleRecord answers), ended as AssembleWith ends it. (Parsing the answer and writing its
    rows again, as ``split_multi_response`` does, spells a float32 of 1e13 to 1e16 otherwise.)"""
    import numpy as np

    from tfbatch.records.payloads import joined_outputs
    from tfbatch.runtime import jsonenc
    from tfbatch.tfs.codec import encode_predict

    shape = (n,) if width is None else (n, width)
    if dtype == "bool":
        values = st.booleans()
    elif dtype == "int64":
        values = st.integers(-2**63, 2**63 - 1)
    else:
        values = st.floats(width=32 if dtype == "float32" else 64, allow_nan=True, allow_infinity=True)
    flat = data.draw(st.lists(values, min_size=int(np.prod(shape)), max_size=int(np.prod(shape))))
    arr = np.array(flat, dtype=dtype).reshape(shape)

    def answer(rows):
        return jsonenc.dumps(encode_predict({"out": rows}, "row", native=True))

    block = joined_outputs(answer(arr), n, line)
    assert block is not None, answer(arr)  # rows of numbers: cut at once
    assert block == b"".join(answer(arr[i:i + 1]) + (b"\n" if line else b"") for i in range(n))
    assert joined_outputs(b'{"predictions":[[1,2],[3,[4]]]}', 2, line) is None  # nested: left to the split
    assert joined_outputs(b'{"predictions":[1,2],"other":3}', 2, line) is None
    assert joined_outputs(b'{"predictions":[1,2,3]}', 2, line) is None  # not a row per record
    assert joined_outputs(b'{"predictions": [1, 2]}', 2, line) is None  # not the service's compact text
