"""CSV and JSON Lines jobs with MultiRecord payloads: the handler workers' bulk parse
(``defaults.table_tensors``, orjson per line) answers exactly what the general path answers,
and a bad row still costs one error line, with the general path's error text."""

from __future__ import annotations

import json
from pathlib import Path

from tfbatch import run_transform

CSV_ROWS = [b"1,2,3", b"4,-0,6\r", b"7.5,8e-1,+9", b"1,abc,3", b"-0.0,0.25,1e2", b"10,11,12"]
JSONL_ROWS = [b"[1, 2, 3]", b"[4,-0,6]", b"[7.5, 0.8, 9]", b"[1, \"abc\", 3]", b"{bad", b"[-0.0,0.25,100]", b"[10,11,12]"]


def _job(tmp_path: Path, model: Path, name: str, files: dict[str, bytes], content_type: str,
         **flags) -> tuple[object, dict[str, bytes]]:
    inp = tmp_path / f"in-{name}"
    inp.mkdir()
    for key, body in files.items():
        (inp / key).write_bytes(body)
    out = tmp_path / f"out-{name}"
    report = run_transform(model=str(model), input=str(inp), output=str(out), split_type="Line",
                           batch_strategy="MultiRecord", content_type=content_type, assemble_with="Line", **flags)
    return report, {key: (out / f"{key}.out").read_bytes() for key in files}


def test_csv_bulk_parse_answers_as_the_general_path(tmp_path, linear_model):
    good = [row for row in CSV_ROWS if b"abc" not in row]
    # good.csv is one payload the bulk parse reads whole; bad.csv fails as a payload, and its
    # rows are rerun one by one (the good ones through the bulk parse again, alone).
    files = {"good.csv": b"\n".join(good) + b"\n", "bad.csv": b"\n".join(CSV_ROWS) + b"\n"}
    bulk_report, bulk = _job(tmp_path, linear_model, "pool", files, "text/csv", handler_workers=1)
    # No worker: the in-process service reads the same bodies with the csv module, cell by cell.
    general_report, general = _job(tmp_path, linear_model, "general", files, "text/csv", handler_workers=0)
    assert bulk == general
    assert bulk_report.failed_records == general_report.failed_records == 1
    lines = bulk["bad.csv"].splitlines()
    assert len(lines) == len(CSV_ROWS) and bulk["good.csv"].splitlines() == lines[:3] + lines[4:]
    error = json.loads(lines[3])
    assert error["record"] == 3 and "got string" in error["error"]
    assert all("predictions" in json.loads(line) for n, line in enumerate(lines) if n != 3)


def test_json_lines_bulk_parse_answers_as_the_general_path(tmp_path, linear_model):
    body = b"\n".join(JSONL_ROWS) + b"\n"
    bulk_report, bulk = _job(tmp_path, linear_model, "pool", {"t.jsonl": body}, "application/jsonlines",
                             handler_workers=1)
    lines = bulk["t.jsonl"].splitlines()
    assert len(lines) == len(JSONL_ROWS) and bulk_report.failed_records == 2
    assert json.loads(lines[3])["record"] == 3 and json.loads(lines[4])["record"] == 4
    assert "line 1" in json.loads(lines[4])["error"]  # the standard library's words, for that record alone
    assert all("predictions" in json.loads(line) for n, line in enumerate(lines) if n not in (3, 4))


def test_json_lines_sent_as_application_json_go_many_to_a_request(tmp_path, linear_model):
    # MultiRecord payloads of JSON lines under application/json: the container reads such a
    # body as JSON Lines, so a payload is one request with a row per line, not a 400 that sent
    # each of its lines on its own. Every output line is the application/jsonlines job's; a
    # bad line's error names the type it was sent as.
    good = [b"[%d, %d.5, -%d]" % (n, n, n) for n in range(300)]
    files = {"good.txt": b"\n".join(good) + b"\n", "mixed.txt": b"\n".join(good[:20] + JSONL_ROWS) + b"\n"}
    report, as_json = _job(tmp_path, linear_model, "json", files, "application/json")
    reference_report, as_lines = _job(tmp_path, linear_model, "jsonl", files, "application/jsonlines")
    assert report.records == len(good) + 20 + len(JSONL_ROWS)
    assert report.failed_records == reference_report.failed_records == 2
    assert as_json["good.txt"] == as_lines["good.txt"]
    got, expected = as_json["mixed.txt"].splitlines(), as_lines["mixed.txt"].splitlines()
    assert len(got) == len(expected) == 20 + len(JSONL_ROWS)
    for line, reference in zip(got, expected):
        if b'"error"' not in line:
            assert line == reference
    bad = json.loads(got[24])  # "{bad", alone: one body of application/json
    assert bad["record"] == 24 and bad["error"].startswith("application/json body is not valid JSON")
    # Requests: good.txt alone is one payload, one request, as in the JSON Lines job; before,
    # each of its lines went alone (150 handler-pool hops against 2). mixed.txt is left out of
    # this count: it fails as a payload in both jobs, and how its lines group into hops varies.
    good_report, _ = _job(tmp_path, linear_model, "json-good", {"good.txt": files["good.txt"]}, "application/json")
    lines_report, _ = _job(tmp_path, linear_model, "jsonl-good", {"good.txt": files["good.txt"]},
                           "application/jsonlines")
    (stats,) = good_report.batches.values()
    (reference,) = lines_report.batches.values()
    assert stats["hops"] == reference["hops"]
