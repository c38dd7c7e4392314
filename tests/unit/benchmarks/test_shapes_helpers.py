"""The job-shape benchmark's pure helpers: reading outputs back, judging agreement, the
steady rate from per-object finish times, and the HTTP agent's record splitting and payloads."""

from __future__ import annotations

import json
import struct

import pytest

from benchmarks.transform.shape_data import RECORDIO_MAGIC, recordio_frame
from benchmarks.transform.shape_http import payloads, split_records
from benchmarks.transform.shape_outputs import agreement, ratio, rows_of_text, steady_rate


def test_rows_are_the_same_whatever_the_grouping_into_answers():
    one_answer = json.dumps({"predictions": [[0.1, 0.9], [0.7, 0.3]]})
    per_line = "\n".join(json.dumps({"predictions": [row]}) for row in ([0.1, 0.9], [0.7, 0.3])) + "\n"
    row_objects = json.dumps({"predictions": [{"classes": 1, "probabilities": [0.1, 0.9]},
                                              {"classes": 0, "probabilities": [0.7, 0.3]}]})
    assert rows_of_text(one_answer) == rows_of_text(per_line) == rows_of_text(row_objects) == [[0.1, 0.9], [0.7, 0.3]]


def test_a_line_that_is_not_json_is_named():
    with pytest.raises(ValueError, match="line 2"):
        rows_of_text('{"predictions": [[1]]}\nnot json\n')


def test_agreement_within_rounding_and_what_breaks_it():
    ref = {"x.out": [[0.1, 0.9], [0.6, 0.4]]}
    close = {"x.out": [[0.1000001, 0.8999999], [0.6, 0.4]]}
    assert agreement(ref, close)["same"] and agreement(ref, close)["same_top1"] == 2
    flipped = {"x.out": [[0.9, 0.1], [0.6, 0.4]]}
    got = agreement(ref, flipped)
    assert not got["same"] and got["same_top1"] == 1 and got["max_abs_diff"] == pytest.approx(0.8)
    fewer_rows = {"x.out": [[0.1, 0.9]]}
    assert agreement(ref, fewer_rows)["row_count_mismatch"] == ["x.out"]
    assert not agreement(ref, fewer_rows)["same"]
    assert agreement(ref, {})["missing"] == ["x.out"] and not agreement(ref, {})["same"]


def test_steady_rate_skips_warm_up_and_does_not_credit_the_opening_instant():
    # 10 objects of 10 records, one per second from t=1: the window opens at t=1 (the first
    # 10 % are done then) and counts the 90 records finished after it, over 9 seconds.
    rate, start, counted = steady_rate([(float(t), 10) for t in range(1, 11)])
    assert (rate, start, counted) == (10.0, 1.0, 90)
    # Weighted by records: one big object late counts for all its records.
    rate, start, counted = steady_rate([(1.0, 5), (2.0, 5), (4.0, 90)])
    assert start == 2.0 and counted == 90 and rate == pytest.approx(45.0)
    assert steady_rate([]) == (None, None, 0)
    assert steady_rate([(5.0, 10), (5.0, 10)])[0] is None  # everything at one instant: no rate


def test_ratio_is_none_when_either_side_is_missing():
    assert ratio(2.0, 4.0) == 0.5 and ratio(None, 4.0) is None and ratio(2.0, 0.0) is None


def _tfrecord(data: bytes) -> bytes:
    return struct.pack("<Q", len(data)) + b"\0" * 4 + data + b"\0" * 4


def test_split_records_strips_each_framing_and_keeps_it_for_multirecord():
    assert [s for _, s in split_records(b"a,1\r\nb,2\n\n c \n", "Line")] == [b"a,1", b"b,2", b" c "]
    blob = _tfrecord(b"one") + _tfrecord(b"three")
    assert [s for _, s in split_records(blob, "TFRecord")] == [b"one", b"three"]
    assert b"".join(f for f, _ in split_records(blob, "TFRecord")) == blob
    rio = recordio_frame(b"abcde") + recordio_frame(b"xy")
    assert [s for _, s in split_records(rio, "RecordIO")] == [b"abcde", b"xy"]
    assert len(recordio_frame(b"abcde")) == 8 + 8  # padded to 4 bytes
    with pytest.raises(ValueError, match="runs past the end"):
        list(split_records(blob[:-3], "TFRecord"))
    with pytest.raises(ValueError, match="RecordIO magic"):
        list(split_records(b"\0" * 8, "RecordIO"))


def test_recordio_frame_refuses_data_holding_the_magic_at_an_aligned_offset():
    with pytest.raises(ValueError):
        recordio_frame(b"abcd" + struct.pack("<I", RECORDIO_MAGIC))
    recordio_frame(b"abc" + struct.pack("<I", RECORDIO_MAGIC))  # unaligned: MXNet does not split it


def test_multirecord_payloads_fill_up_to_the_limit_and_never_split_a_record():
    data = b"".join(b"%03d\n" % i for i in range(10))  # 10 lines of 4 bytes
    bodies = payloads(data, "Line", "MultiRecord", 12)
    assert bodies == [b"000\n001\n002\n", b"003\n004\n005\n", b"006\n007\n008\n", b"009\n"]
    assert payloads(data, "Line", "SingleRecord", 12)[:2] == [b"000", b"001"]
    assert payloads(b"x" * 20 + b"\n", "Line", "MultiRecord", 4) == [b"x" * 20 + b"\n"]  # one oversize record alone


def test_marginal_rate_cancels_start_up_and_reports_a_failed_half_job():
    from benchmarks.transform.shapes import marginal

    full = {"ok": True, "error": None, "records": 1000, "wall_s": 14.0, "cpu_s": 20.0}
    half = {"ok": True, "error": None, "records": 500, "wall_s": 9.0, "cpu_s": 15.0}
    got = marginal(full, half)
    assert got["steady_per_s"] == pytest.approx(100.0) and got["steady_cpu_ms_per_record"] == pytest.approx(10.0)
    broken = marginal(full, {**half, "ok": False, "error": "exit code 1"})
    assert broken == {"ok": False, "error": "half job: exit code 1"}


def test_cpu_ratio_is_the_median_over_rounds_of_other_over_a():
    from benchmarks.transform.shapes import cpu_ratio

    def run(c, n, cpu, ok=True):
        return {"contender": c, "round": n, "ok": ok, "steady_cpu_ms_per_record": cpu}

    runs = [run("a", 0, 1.0), run("b", 0, 0.5), run("a", 1, 2.0), run("b", 1, 2.0), run("a", 2, 1.0), run("b", 2, 9.0, ok=False)]
    assert cpu_ratio(runs, "b") == 0.75  # rounds 0 and 1; round 2's (b) failed
    assert cpu_ratio(runs, "c") is None


def test_joined_outputs_read_as_rows_and_the_agent_filters_and_joins_per_record():
    from benchmarks.transform.shape_http import _process, filtered_payloads
    from benchmarks.transform.shape_tfdata import _joined
    from tfbatch.records.join import DataProcessor

    rows = [[0.25, 0.75], [0.5, 0.5]]
    answer = json.dumps({"predictions": rows}).encode()
    # CSV with an id: the agent sends the features only, then writes the id beside each row
    dp = DataProcessor("$[1:]", "$[0,-2:]", "Input", "text/csv", None)
    (body, records), = filtered_payloads(b"a,1,2\nb,3,4\n", "Line", "MultiRecord", 2**20, dp)
    assert body == b"1,2\n3,4\n" and records == [b"a,1,2", b"b,3,4"]
    agent = _process(dp, records, answer)
    assert agent == b"a,0.25,0.75\nb,0.5,0.5"
    assert agent == b"\n".join(_joined(i, r, "csv-id") for i, r in zip((b"a", b"b"), rows))
    assert rows_of_text(agent.decode()) == rows
    # SingleRecord: one unframed record per request
    assert [b for b, _ in filtered_payloads(b"a,1,2\nb,3,4\n", "Line", "SingleRecord", 2**20, dp)] == [b"1,2", b"3,4"]
    # JSON Lines joined whole, and with an id kept
    plain = _process(DataProcessor(None, None, "Input", "application/jsonlines", None), [b"[1,2]", b"[3,4]"], answer)
    assert rows_of_text(plain.decode()) == rows
    keyed = _process(DataProcessor("$.features", "$['id','SageMakerOutput']", "Input", "application/jsonlines", None),
                     [b'{"id":"a","features":[1,2]}', b'{"id":"b","features":[3,4]}'], answer)
    assert keyed.splitlines()[0] == _joined(b"a", rows[0], "jsonl-id")
    assert rows_of_text(keyed.decode()) == rows
    # a CSV row joined whole reads as all its numbers
    assert rows_of_text("1,2,0.25,0.75\n") == [[1, 2, 0.25, 0.75]]
    with pytest.raises(ValueError, match="2 records but 1 predictions"):
        _process(dp, records, json.dumps({"predictions": rows[:1]}).encode())
    with pytest.raises(ValueError, match="line 1 is neither JSON nor a CSV row"):
        rows_of_text("1,x\n")
