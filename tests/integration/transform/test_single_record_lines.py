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


@pytest.mark.parametrize(("content_type", "odd", "good"), [
    ("text/csv", CSV_ODD, GOOD),
    ("application/jsonlines", JSONL_ODD, JSON_GOOD),
    ("application/json", JSON_ODD_OBJECTS, JSON_GOOD),
])
def test_joined_lines_answer_as_each_line_alone(tmp_path, linear_model, content_type, odd, good):
    lines = _lines(odd, good)
    inp, alone = tmp_path / "in", tmp_path / "alone"
    inp.mkdir()
    alone.mkdir()
    (inp / "t.txt").write_bytes(b"\n".join(lines) + b"\n")
    for n, line in enumerate(lines):
        (alone / f"r{n:04d}").write_bytes(line)
    report = run_transform(model=str(linear_model), input=str(inp), output=str(tmp_path / "out"),
                           content_type=content_type, split_type="Line", batch_strategy="SingleRecord",
                           assemble_with="Line")
    each = run_transform(model=str(linear_model), input=str(alone), output=str(tmp_path / "each"),
                         content_type=content_type, split_type="None")
    assert report.records == len(lines)
    (stats,) = report.batches.values()
    assert stats["rows"] < len(lines) / 10  # requests: the good lines went many to one

    got = (tmp_path / "out" / "t.txt.out").read_bytes().split(b"\n")
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
