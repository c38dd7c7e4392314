"""SingleRecord line jobs (CSV, JSON Lines, JSON arrays) with no script: runs of lines go to
the model as one request (records/payloads.py ``join_single``), and every record still gets
what it gets alone, byte for byte, errors included.

The reference is the same lines as one object each (SplitType None), each its own request."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tfbatch import run_transform

GOOD = [b"%d,%d.5,-%d" % (n, n, n) for n in range(140)]
# "\xc2\xa0" (a no-break space) is blank to the parser but not to join_single's byte check: its
# run's answer comes back a row short, and the run goes line by line.
BLANKISH = "\xa0".encode()
CSV_ODD = [b"1,2,3", b"4,-0,6", b"7.5,8e-1,+9", b"1,abc,3", b"   ", BLANKISH, b'"1",2,3', b"12345678901234567,1,2.5",
           b"1,2", b"10,11,12"]
JSON_GOOD = [b"[%d, %d.5, -%d]" % (n, n, n) for n in range(140)]
JSON_ODD = [b"[1, 2, 3]", b"[4,-0,6]", b"[true, 0.5, 1]", b"[1, \"abc\", 3]", b"[1, 2", b"  [0.25, 1e2, 7]",
            b"[12345678901234567, 0.5, 1]", b"[NaN, 1, 2]", b"[1, 2]", b"[10,11,12]"]
JSONL_ODD = JSON_ODD + [b'{"x": [1, 2, 3]}', b'"text"', BLANKISH]
# application/json objects: named inputs (one instance each, joined), a request of its own, and
# one spelling "instances" with an escape (both sent alone).
JSON_ODD_OBJECTS = JSON_ODD + [b'{"x": [4, 5, 6]}', b'{"x": [1, 2, 3], "y": 1}',
                               b'{"instances": [[1, 2, 3], [4, 5, 6]]}', b'{"\\u0069nstances": [[7, 8, 9]]}']


def _lines(odd: list[bytes], good: list[bytes]) -> list[bytes]:
    """Odd records spread through runs of good ones (several joined requests per file)."""
    lines = list(good)
    for n, line in enumerate(odd):
        lines.insert(7 + 13 * n, line)
    return lines


def _errors(out: Path) -> list[dict]:
    path = out / "_tfbatch" / "errors.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _joined_and_alone(tmp_path: Path, model: Path, content_type: str, lines: list[bytes], **processing):
    """The lines as one SingleRecord Line object, and each line as an object of its own
    (SplitType None), with the same DataProcessing: both reports and the joined job's lines."""
    inp, alone = tmp_path / "in", tmp_path / "alone"
    inp.mkdir()
    alone.mkdir()
    (inp / "t.txt").write_bytes(b"\n".join(lines) + b"\n")
    for n, line in enumerate(lines):
        (alone / f"r{n:04d}").write_bytes(line)
    report = run_transform(model=str(model), input=str(inp), output=str(tmp_path / "out"),
                           content_type=content_type, split_type="Line", batch_strategy="SingleRecord",
                           assemble_with="Line", **processing)
    each = run_transform(model=str(model), input=str(alone), output=str(tmp_path / "each"),
                         content_type=content_type, split_type="None", **processing)
    return report, each, (tmp_path / "out" / "t.txt.out").read_bytes().split(b"\n")


def _assert_each_line_as_alone(tmp_path: Path, lines: list[bytes], report, each, got: list[bytes]) -> None:
    """Every line answered byte for byte as alone; the same records failed, with the same error."""
    assert got[-1] == b"" and len(got) == len(lines) + 1
    errors_alone = {int(e["object"][1:]): e for e in _errors(tmp_path / "each")}
    errors = {e["record"]: e for e in _errors(tmp_path / "out")}
    assert sorted(errors) == sorted(errors_alone) and errors  # the same records failed ...
    assert report.failed_records == each.failed_records == len(errors)
    for n, line in enumerate(got[:-1]):
        if n in errors:
            # ... with the error each gets alone, on its own line
            assert json.loads(line)["error"] == errors[n]["error"] == errors_alone[n]["error"]
        else:
            assert line == (tmp_path / "each" / f"r{n:04d}.out").read_bytes()


@pytest.mark.parametrize(("content_type", "odd", "good"), [
    ("text/csv", CSV_ODD, GOOD),
    ("application/jsonlines", JSONL_ODD, JSON_GOOD),
    ("application/json", JSON_ODD_OBJECTS, JSON_GOOD),
])
def test_joined_lines_answer_as_each_line_alone(tmp_path, linear_model, content_type, odd, good):
    lines = _lines(odd, good)
    report, each, got = _joined_and_alone(tmp_path, linear_model, content_type, lines)
    assert report.records == len(lines)
    (stats,) = report.batches.values()
    assert stats["rows"] < len(lines) / 10  # requests: the good lines went many to one
    _assert_each_line_as_alone(tmp_path, lines, report, each, got)


def test_lines_of_a_script_job_go_one_per_request(tmp_path, linear_model, with_script):
    """An input_handler sees every SingleRecord line as its own request, as in SageMaker."""
    archive = with_script(tmp_path, linear_model, """
        import json

        def input_handler(data, context):
            body = data.read().decode()
            assert "\\n" not in body, body
            return json.dumps({"instances": [[float(v) for v in body.split(",")]]})

        def output_handler(response, context):
            return response.content, context.accept_header
    """)
    inp = tmp_path / "in"
    inp.mkdir()
    (inp / "t.csv").write_bytes(b"\n".join(GOOD[:40]) + b"\n")
    report = run_transform(model=str(archive), input=str(inp), output=str(tmp_path / "out"), content_type="text/csv",
                           split_type="Line", batch_strategy="SingleRecord", assemble_with="Line")
    assert report.failed_records == 0 and report.records == 40
    (stats,) = report.batches.values()
    assert stats["rows"] == 40


# SingleRecord lines with DataProcessing (the guide's job: an id kept out of the model and put
# back beside its prediction). CSV and JSON Lines runs join after the InputFilter; a record the
# filter refuses, or whose filtered row could not be joined, goes alone and fails or answers there.
CSV_ID_GOOD = [b"r%d,%d,%d.5,-%d" % (n, n, n, n) for n in range(140)]
CSV_ID_ODD = [b'"r,q",1,2,3', b"r1,abc,2,3", b"   ", b"r2,1,2", b"r3,1,2,3,4", b"r4", b"r5,12345678901234567,1,2",
              b"r6,1,2,\xff"]
JSONL_ID_GOOD = [b'{"id": "r%d", "x": [%d, %d.5, -%d]}' % (n, n, n, n) for n in range(140)]
JSONL_ID_ODD = [b'{"id": "a", "y": [1, 2, 3]}', b'{"id": "b", "x": [1, 2]}', b'{"id": "c", "x": [true, 1, 2]}',
                b'{"id": "d", "x": "text"}', b'{"id": "e", "x": [1, 2, 3]', b'[1, 2, 3]', BLANKISH,
                b'{"id": "f", "x": [NaN, 1, 2]}']


@pytest.mark.parametrize(("content_type", "odd", "good", "filters"), [
    ("text/csv", CSV_ID_ODD, CSV_ID_GOOD, ("$[1:]", "$[0,-2:]")),
    ("application/jsonlines", JSONL_ID_ODD, JSONL_ID_GOOD, ("$.x", "$['id','SageMakerOutput']")),
])
def test_joined_lines_with_dataprocessing_answer_as_each_line_alone(tmp_path, linear_model, content_type, odd,
                                                                    good, filters):
    lines = _lines(odd, good)
    report, each, got = _joined_and_alone(tmp_path, linear_model, content_type, lines, input_filter=filters[0],
                                          output_filter=filters[1], join_source="Input")
    assert report.records == len(lines)
    (stats,) = report.batches.values()
    assert stats["rows"] < len(lines) / 5  # requests: the good lines went many to one
    _assert_each_line_as_alone(tmp_path, lines, report, each, got)
    assert b"r139" in got[-2]  # the id came back beside the prediction


def test_json_lines_with_an_input_filter_go_one_per_request(tmp_path, linear_model):
    """application/json lines join into a JSON Lines body, which an application/json InputFilter
    cannot read: with DataProcessing they go one per request, and answer as alone."""
    lines = [b'{"id": "r%d", "x": [%d, 1, 2]}' % (n, n) for n in range(30)]
    inp = tmp_path / "in"
    inp.mkdir()
    (inp / "t.txt").write_bytes(b"\n".join(lines) + b"\n")
    report = run_transform(model=str(linear_model), input=str(inp), output=str(tmp_path / "out"),
                           content_type="application/json", split_type="Line", batch_strategy="SingleRecord",
                           assemble_with="Line", input_filter="$.x", join_source="Input",
                           output_filter="$['id','SageMakerOutput']")
    assert report.failed_records == 0 and report.records == 30
    (stats,) = report.batches.values()
    assert stats["rows"] == 30
    first = json.loads((tmp_path / "out" / "t.txt.out").read_bytes().split(b"\n")[0])
    assert first["id"] == "r0" and len(first["SageMakerOutput"]["predictions"][0]) == 2


def test_a_failed_request_is_retried_and_isolated_as_it_was_sent(tmp_path, linear_model):
    """A request the dataflow's hop answered with an error goes through the Invoker's retries
    and isolation again: with the body the model was sent, after the InputFilter (it had been
    sent unfiltered there, so a retried request reached the model with the id column, and a bad
    record's error described a request the model was never sent). The filter reverses the
    columns, so a request sent unfiltered would be answered with another prediction."""
    inp, ref = tmp_path / "in", tmp_path / "ref"
    inp.mkdir()
    ref.mkdir()
    bad = {n for n in range(60) if n % 9 == 4}
    for n in range(60):
        row = [n, n + 0.5, -n]
        (inp / f"r{n:03d}").write_bytes(b"r,1,abc,3" if n in bad else b"r%d," % n + ",".join(map(str, row)).encode())
        if n not in bad:
            (ref / f"r{n:03d}").write_bytes(",".join(map(str, row[::-1])).encode())
    report = run_transform(model=str(linear_model), input=str(inp), output=str(tmp_path / "out"),
                           content_type="text/csv", input_filter="$[3,2,1]")
    expected = run_transform(model=str(linear_model), input=str(ref), output=str(tmp_path / "expected"),
                             content_type="text/csv")
    assert expected.failed_records == 0 and report.failed_records == len(bad)
    for error in _errors(tmp_path / "out"):
        # "3,abc,1": three columns, one of them text, is what the model was sent
        assert "got string with shape [1, 3]" in error["error"], error
    for n in set(range(60)) - bad:
        name = f"r{n:03d}.out"
        assert (tmp_path / "out" / name).read_bytes() == (tmp_path / "expected" / name).read_bytes(), name


@pytest.mark.parametrize(("content_type", "odd", "good"), [
    ("application/jsonlines", [b"[NaN, 1, 2]", b"[1, Infinity, 2]", b"[-Infinity, 0, 1]"], JSON_GOOD),
    ("text/csv", [b"nan,1,2", b"1,inf,2", b"-inf,0,1"], GOOD),
])
def test_a_non_finite_row_answers_in_its_run_as_alone(tmp_path, linear_model, content_type, odd, good):
    """A run whose answer holds NaN or Infinity: that record keeps TF Serving's token (not
    null), and its neighbours the digits they get alone."""
    lines = _lines(odd, good)
    report, each, got = _joined_and_alone(tmp_path, linear_model, content_type, lines)
    assert report.failed_records == each.failed_records
    for n, line in enumerate(got[:-1]):
        if (tmp_path / "each" / f"r{n:04d}.out").exists():
            assert line == (tmp_path / "each" / f"r{n:04d}.out").read_bytes(), (n, lines[n])
    assert each.failed_records or any(b"NaN" in line or b"Infinity" in line for line in got)


# A scripted SingleRecord job: each line is its own request through the hooks, and the handler
# workers hand back runs of them as one array (pool_worker.join_runs) that share a model call.
# Negative values make the whole call fail (each request of it then runs alone: one error line
# each), other column counts break a run, and a line the hook refuses has no tensors at all.
SCRIPTED_CSV = [b"%d,%d.5" % (n, n) for n in range(300)]
SCRIPTED_ODD = [b"-1,2", b"1,2,3", b"abc,1", b"4,-0.5", b"7", b"8,9"]


@pytest.mark.parametrize("workers", [0, 2])
def test_runs_of_scripted_lines_answer_as_each_line_alone(tmp_path, failing_model, with_script, workers):
    archive = with_script(tmp_path, failing_model, """
        import json

        def input_handler(data, context):
            return json.dumps({"instances": [[float(v) for v in data.read().decode().split(",")]]})

        def output_handler(response, context):
            if response.status_code != 200:
                raise ValueError(response.content.decode("utf-8"))
            return response.content, context.accept_header
    """)
    lines = _lines(SCRIPTED_ODD, SCRIPTED_CSV)
    report, each, got = _joined_and_alone(tmp_path, archive, "text/csv", lines, handler_workers=workers,
                                          max_batch_size=64)
    assert report.records == len(lines)
    (stats,) = report.batches.values()
    assert stats["rows"] == len(lines)  # one request per line
    _assert_each_line_as_alone(tmp_path, lines, report, each, got)
    errors = {e["record"] for e in _errors(tmp_path / "out")}
    assert {lines.index(b"-1,2"), lines.index(b"4,-0.5"), lines.index(b"abc,1")} <= errors
    assert json.loads(got[0]) == {"predictions": [[1.0, 1.5]]}
