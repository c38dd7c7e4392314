"""COMPAT §7 semantics of a transform job, with a real tiny model and real files."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from tfbatch import run_transform
from tfbatch.records import write_tfrecord
from tfbatch.testing.models import linear_expected
from tfbatch.transform import TransformSpec
from tfbatch.transform.spec import default_concurrency


ROWS = [[1.0, 2.0, 3.0], [0.5, -1.0, 4.0], [2.0, 0.0, -3.0], [7.0, 1.0, 1.0]]


def _jsonl(rows) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in rows)


def _predictions(out: Path) -> list[list[float]]:
    return [json.loads(line)["predictions"][0] for line in out.read_bytes().splitlines()]


def _write(root: Path, files: dict[str, bytes]) -> Path:
    for key, data in files.items():
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(data)
    return root


def test_line_split_keeps_order_and_key_layout(tmp_path, linear_model):
    inp = _write(tmp_path / "in", {"a.jsonl": _jsonl(ROWS), "sub/deeper/b.jsonl": _jsonl(ROWS[::-1])})
    out = tmp_path / "out"
    report = run_transform(model=str(linear_model), input=str(inp), output=str(out), split_type="Line",
                           content_type="application/json", assemble_with="Line")
    assert report.ok and report.objects == 2 and report.records == 8
    expected = linear_expected(np.array(ROWS, np.float32))
    np.testing.assert_allclose(_predictions(out / "a.jsonl.out"), expected, rtol=1e-5)
    np.testing.assert_allclose(_predictions(out / "sub/deeper/b.jsonl.out"), expected[::-1], rtol=1e-5)
    produced = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.out"))
    assert produced == ["a.jsonl.out", "sub/deeper/b.jsonl.out"]
    saved = json.loads((out / "_tfbatch" / "report.json").read_text())
    assert saved["records"] == 8 and saved["ok"] is True


def test_multirecord_gives_the_same_outputs_as_singlerecord(tmp_path, linear_model):
    rows = [[float(i), float(i % 7), -float(i)] for i in range(300)]
    inp = _write(tmp_path / "in", {"x.jsonl": _jsonl(rows)})
    outs = {}
    for strategy in ("SingleRecord", "MultiRecord"):
        out = tmp_path / strategy
        report = run_transform(model=str(linear_model), input=str(inp), output=str(out), split_type="Line",
                               batch_strategy=strategy, content_type="application/jsonlines",
                               assemble_with="Line")
        assert report.ok, report.summary()
        outs[strategy] = (out / "x.jsonl.out").read_bytes()
    # MultiRecord responses are split per record with the service's own encoder: same bytes.
    assert outs["SingleRecord"] == outs["MultiRecord"]
    assert len(outs["MultiRecord"].splitlines()) == 300


ECHO = """
import json, os

def handler(data, context):
    body = data.read()
    lines = [ln for ln in body.split(b"\\n") if ln]
    return "".join(f"{len(lines)}:{len(body)}:{ln.decode()}\\n" for ln in lines), "text/plain"
"""


def test_multirecord_packs_whole_records_up_to_the_limit_and_never_spans_objects(tmp_path, linear_model, with_script):
    line = lambda i: (f"{i:04d}" + "x" * 300_000).encode() + b"\n"  # noqa: E731
    big = b"".join(line(i) for i in range(8))  # 8 x 300 KB: 3 records fit in 1 MB
    small = b"one\ntwo\n"
    inp = _write(tmp_path / "in", {"big.txt": big, "small.txt": small})
    out = tmp_path / "out"
    archive = with_script(tmp_path, linear_model, ECHO)
    report = run_transform(model=str(archive), input=str(inp), output=str(out), split_type="Line",
                           batch_strategy="MultiRecord", max_payload_mb=1, content_type="text/plain")
    assert report.ok, report.summary()
    got = (out / "big.txt.out").read_text().splitlines()
    counts = [int(g.split(":")[0]) for g in got]
    sizes = [int(g.split(":")[1]) for g in got]
    assert [g.split(":")[2][:4] for g in got] == [f"{i:04d}" for i in range(8)]  # input order
    assert counts == [3, 3, 3, 3, 3, 3, 2, 2] and max(sizes) <= 1024 * 1024
    # The request held whole framed lines (newlines kept) and nothing of the other object.
    assert (out / "small.txt.out").read_text() == "2:8:one\n2:8:two\n"

    out0 = tmp_path / "unlimited"
    run_transform(model=str(archive), input=str(inp), output=str(out0), split_type="Line",
                  batch_strategy="MultiRecord", max_payload_mb=0, content_type="text/plain")
    assert {int(g.split(":")[0]) for g in (out0 / "big.txt.out").read_text().splitlines()} == {8}


LENGTHS = """
def handler(data, context):
    return str(len(data.read())), "text/plain"
"""


def test_singlerecord_strips_framing_multirecord_keeps_it(tmp_path, linear_model, with_script):
    payloads = [b"a" * 10, b"b" * 20, b"c" * 5]
    inp = _write(tmp_path / "in", {"r.tfrecord": write_tfrecord(payloads)})
    archive = with_script(tmp_path, linear_model, LENGTHS)
    common = dict(model=str(archive), input=str(inp), split_type="TFRecord", content_type="application/octet-stream")
    run_transform(output=str(tmp_path / "single"), batch_strategy="SingleRecord", assemble_with="Line", **common)
    assert (tmp_path / "single" / "r.tfrecord.out").read_text().splitlines() == ["10", "20", "5"]
    run_transform(output=str(tmp_path / "multi"), batch_strategy="MultiRecord", **common)
    assert (tmp_path / "multi" / "r.tfrecord.out").read_text() == str(sum(len(p) + 16 for p in payloads))


def test_record_over_the_payload_limit_fails_alone(tmp_path, linear_model):
    rows = [json.dumps([1, 2, 3]).encode(), b"[" + b" " * (1024 * 1024 + 10) + b"1,2,3]", json.dumps([4, 5, 6]).encode()]
    inp = _write(tmp_path / "in", {"f.jsonl": b"\n".join(rows) + b"\n"})
    out = tmp_path / "out"
    report = run_transform(model=str(linear_model), input=str(inp), output=str(out), split_type="Line",
                           max_payload_mb=1, content_type="application/json", assemble_with="Line")
    assert not report.ok and report.failed_records == 1
    lines = (out / "f.jsonl.out").read_bytes().splitlines()
    assert len(lines) == 3
    assert "MaxPayloadInMB" in json.loads(lines[1])["error"] and json.loads(lines[1])["record"] == 1
    np.testing.assert_allclose(json.loads(lines[2])["predictions"][0], linear_expected(np.array([[4, 5, 6]], np.float32))[0], rtol=1e-5)


def test_csv_input_filter_join_and_output_filter(tmp_path, linear_model):
    csv = b"id1,1,2,3\nid2,4,5,6\n"
    inp = _write(tmp_path / "in", {"t.csv": csv})
    out = tmp_path / "out"
    report = run_transform(model=str(linear_model), input=str(inp), output=str(out), split_type="Line",
                           content_type="text/csv", accept="text/csv", assemble_with="Line",
                           input_filter="$[1:]", join_source="Input", output_filter="$[0,-2,-1]")
    assert report.ok, report.summary()
    expected = linear_expected(np.array([[1, 2, 3], [4, 5, 6]], np.float32))
    rows = [line.split(",") for line in (out / "t.csv.out").read_text().splitlines()]
    assert [r[0] for r in rows] == ["id1", "id2"]
    np.testing.assert_allclose([[float(v) for v in r[1:]] for r in rows], expected, rtol=1e-5)


def test_json_join_adds_sagemaker_output(tmp_path, linear_model):
    records = [{"id": 1, "features": [1, 2, 3]}, {"id": 2, "features": [4, 5, 6]}]
    inp = _write(tmp_path / "in", {"j.jsonl": _jsonl(records)})
    out = tmp_path / "out"
    report = run_transform(model=str(linear_model), input=str(inp), output=str(out), split_type="Line",
                           content_type="application/json", accept="application/json", assemble_with="Line",
                           input_filter="$.features", join_source="Input", output_filter="$['id','SageMakerOutput']")
    assert report.ok, report.summary()
    got = [json.loads(line) for line in (out / "j.jsonl.out").read_text().splitlines()]
    assert [g["id"] for g in got] == [1, 2] and set(got[0]) == {"id", "SageMakerOutput"}
    np.testing.assert_allclose(got[1]["SageMakerOutput"]["predictions"][0],
                               linear_expected(np.array([[4, 5, 6]], np.float32))[0], rtol=1e-5)


def test_json_lines_join_of_a_payload_writes_what_single_records_write(tmp_path, linear_model):
    """A MultiRecord JSON Lines payload is filtered and joined a payload at a time, each row read
    once (records/join.py, filter_keeping): the same bytes as the job sent SingleRecord, and a
    row the InputFilter fails on costs that row alone."""
    good = [{"id": f"r{i}", "features": [i, i + 0.5, -i]} for i in range(40)]
    bad = good[:5] + [{"id": "no-features"}] + good[5:9]
    inp = _write(tmp_path / "in", {"good.jsonl": _jsonl(good), "bad.jsonl": _jsonl(bad)})
    common = dict(model=str(linear_model), input=str(inp), split_type="Line", content_type="application/jsonlines",
                  accept="application/jsonlines", assemble_with="Line", input_filter="$.features",
                  join_source="Input", output_filter="$['id','SageMakerOutput']", on_error="continue")
    multi = run_transform(output=str(tmp_path / "multi"), batch_strategy="MultiRecord", max_payload_mb=1, **common)
    single = run_transform(output=str(tmp_path / "single"), batch_strategy="SingleRecord", **common)
    assert multi.failed_records == single.failed_records == 1
    for name in ("good.jsonl.out", "bad.jsonl.out"):
        assert (tmp_path / "multi" / name).read_bytes() == (tmp_path / "single" / name).read_bytes()
    got = [json.loads(line) for line in (tmp_path / "multi" / "good.jsonl.out").read_text().splitlines()]
    assert [g["id"] for g in got] == [r["id"] for r in good] and all(set(g) == {"id", "SageMakerOutput"} for g in got)
    np.testing.assert_allclose([g["SageMakerOutput"]["predictions"][0] for g in got],
                               linear_expected(np.array([r["features"] for r in good], np.float32)), rtol=1e-5)
    lines = [json.loads(line) for line in (tmp_path / "multi" / "bad.jsonl.out").read_text().splitlines()]
    assert [g.get("id") for g in lines] == [r["id"] if "features" in r else None for r in bad]
    assert "expected key 'features'" in lines[5]["error"] and lines[5]["record"] == 5


def test_gzip_input_matches_plain_input(tmp_path, linear_model):
    plain = _write(tmp_path / "plain", {"a.jsonl": _jsonl(ROWS)})
    gz = _write(tmp_path / "gz", {"a.jsonl": gzip.compress(_jsonl(ROWS))})
    common = dict(model=str(linear_model), split_type="Line", content_type="application/json", assemble_with="Line")
    run_transform(input=str(plain), output=str(tmp_path / "o1"), **common)
    report = run_transform(input=str(gz), output=str(tmp_path / "o2"), compression="Gzip", **common)
    assert report.ok
    assert (tmp_path / "o1" / "a.jsonl.out").read_bytes() == (tmp_path / "o2" / "a.jsonl.out").read_bytes()


def test_manifest_selects_objects_and_keeps_their_keys(tmp_path, linear_model):
    inp = _write(tmp_path / "in", {"a.json": b"[1,2,3]", "d/b.json": b"[4,5,6]", "skip.json": b"[0,0,0]"})
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps([{"prefix": str(inp) + "/"}, "d/b.json", "a.json"]))
    out = tmp_path / "out"
    report = run_transform(model=str(linear_model), manifest=str(manifest), output=str(out),
                           content_type="application/json")
    assert report.ok and report.objects == 2
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*.out")) == ["a.json.out", "d/b.json.out"]


ENV = """
import os

SEEN_AT_IMPORT = os.environ.get("MY_SETTING")

def handler(data, context):
    data.read()
    import json
    return json.dumps({"import": SEEN_AT_IMPORT, "call": os.environ.get("MY_SETTING"),
                       "batch": os.environ.get("SAGEMAKER_BATCH"),
                       "strategy": os.environ.get("SAGEMAKER_BATCH_STRATEGY")}), "application/json"
"""


def test_environment_reaches_the_handler(tmp_path, linear_model, with_script):
    inp = _write(tmp_path / "in", {"a.txt": b"x"})
    out = tmp_path / "out"
    archive = with_script(tmp_path, linear_model, ENV)
    run_transform(model=str(archive), input=str(inp), output=str(out), env={"MY_SETTING": "42"})
    got = json.loads((out / "a.txt.out").read_text())
    assert got == {"import": "42", "call": "42", "batch": "true", "strategy": "SINGLE_RECORD"}


def test_default_concurrency_and_batches_formed_across_files(tmp_path, linear_model):
    inp = _write(tmp_path / "in", {f"f{i:03d}.json": json.dumps([i, 1, 2]).encode() for i in range(64)})
    out = tmp_path / "out"
    report = run_transform(model=str(linear_model), input=str(inp), output=str(out), content_type="application/json",
                           max_batch_size=16, batch_timeout_ms=20)
    assert report.ok and report.objects == 64
    assert report.concurrency == default_concurrency(16) >= 32
    assert TransformSpec.build(model="m", input="i", output="o", max_concurrent_transforms=3).concurrency == 3
    (stats,) = report.batches.values()
    # 64 single-record files in far fewer model batches: requests from many files coalesced.
    assert stats["batches"] < 40, stats
    expected = linear_expected(np.array([[7, 1, 2]], np.float32))[0]
    np.testing.assert_allclose(json.loads((out / "f007.json.out").read_text())["predictions"][0], expected, rtol=1e-5)
