"""No lost work: bad records fail alone, are reported, and retries touch only transient errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tfbatch import run_transform
from tfbatch.records import write_tfrecord

GOOD = [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]


def _lines(rows) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in rows)


def _inputs(root: Path) -> Path:
    root.mkdir()
    # Record 2 makes the model itself fail; the others share model batches with it.
    (root / "mixed.jsonl").write_bytes(_lines([GOOD[0], GOOD[1], [-1.0, 1.0], GOOD[2]]))
    (root / "clean.jsonl").write_bytes(_lines(GOOD))
    return root


def test_bad_record_fails_alone_with_an_error_line_and_a_report(tmp_path, failing_model):
    inp, out = _inputs(tmp_path / "in"), tmp_path / "out"
    report = run_transform(model=str(failing_model), input=str(inp), output=str(out), split_type="Line",
                           content_type="application/json", assemble_with="Line",
                           max_batch_size=8, batch_timeout_ms=50)
    assert not report.ok and report.failed == 1 and report.succeeded == 1 and report.failed_records == 1
    lines = [json.loads(x) for x in (out / "mixed.jsonl.out").read_text().splitlines()]
    assert len(lines) == 4  # line N answers record N
    assert lines[2]["record"] == 2 and "negative input" in lines[2]["error"]
    got = [lines[i]["predictions"][0] for i in (0, 1, 3)]
    np.testing.assert_allclose(got, np.array(GOOD) + 1.0)
    errors = [json.loads(x) for x in (out / "_tfbatch" / "errors.jsonl").read_text().splitlines()]
    assert errors == [{"object": "mixed.jsonl", "record": 2, "offset": 22, "error": errors[0]["error"],
                       "status": 400}]
    assert "negative input" in errors[0]["error"]
    assert report.error_report and report.error_report.endswith("errors.jsonl")
    assert "1 failed" in report.summary()


def test_on_error_fail_object_reproduces_sagemaker(tmp_path, failing_model):
    inp, out = _inputs(tmp_path / "in"), tmp_path / "out"
    report = run_transform(model=str(failing_model), input=str(inp), output=str(out), split_type="Line",
                           content_type="application/json", assemble_with="Line", on_error="fail-object")
    assert not report.ok and report.failed == 1
    assert not (out / "mixed.jsonl.out").exists() and (out / "clean.jsonl.out").exists()
    # Not finished in the ledger: a re-run tries the failed object again.
    again = run_transform(model=str(failing_model), input=str(inp), output=str(out), split_type="Line",
                          content_type="application/json", assemble_with="Line", on_error="fail-object")
    assert again.skipped == 1 and again.objects == 1 and again.failed == 1


def test_multirecord_payload_with_a_bad_record_is_retried_record_by_record(tmp_path, failing_model):
    inp, out = _inputs(tmp_path / "in"), tmp_path / "out"
    report = run_transform(model=str(failing_model), input=str(inp), output=str(out), split_type="Line",
                           batch_strategy="MultiRecord", content_type="application/jsonlines", assemble_with="Line")
    assert report.failed_records == 1
    lines = (out / "mixed.jsonl.out").read_text().splitlines()
    assert len(lines) == 4 and "error" in json.loads(lines[2]) and "predictions" in json.loads(lines[3])


def test_corrupt_tfrecord_and_undecodable_records_are_reported_with_offsets(tmp_path, linear_model):
    good = json.dumps([1, 2, 3]).encode()
    data = bytearray(write_tfrecord([good, good, good]))
    second = len(good) + 16
    data[second + 12] ^= 0xFF  # flip a byte of record 1's payload: its data CRC fails
    inp = tmp_path / "in"
    inp.mkdir()
    (inp / "r.tfrecord").write_bytes(bytes(data))
    out = tmp_path / "out"
    report = run_transform(model=str(linear_model), input=str(inp), output=str(out), split_type="TFRecord",
                           content_type="application/json", assemble_with="Line")
    assert report.records == 3 and report.failed_records == 1
    (err,) = [json.loads(x) for x in (out / "_tfbatch" / "errors.jsonl").read_text().splitlines()]
    assert (err["record"], err["offset"]) == (1, second) and "crc" in err["error"].lower()


COUNTING = """
import json, os
from pathlib import Path
from tfbatch.errors import Unavailable

def handler(data, context):
    body = data.read().decode()
    calls = Path(os.environ["CALLS_DIR"]) / body
    n = int(calls.read_text()) + 1 if calls.exists() else 1
    calls.write_text(str(n))
    if body.startswith("flaky") and n <= 2:
        raise Unavailable("try again later")
    if body.startswith("broken"):
        raise ValueError("this record is broken")
    return body.upper(), "text/plain"
"""


@pytest.mark.parametrize("retries", [3, 1])
def test_only_transient_failures_are_retried(tmp_path, linear_model, with_script, retries):
    inp, out, calls = tmp_path / "in", tmp_path / "out", tmp_path / "calls"
    inp.mkdir()
    calls.mkdir()
    (inp / "a.txt").write_bytes(b"flaky1\nbroken1\nfine1\n")
    archive = with_script(tmp_path, linear_model, COUNTING)
    report = run_transform(model=str(archive), input=str(inp), output=str(out), split_type="Line",
                           content_type="text/plain", assemble_with="Line", env={"CALLS_DIR": str(calls)},
                           invocations_max_retries=retries)
    count = lambda name: int((calls / name).read_text())  # noqa: E731
    lines = (out / "a.txt.out").read_text().splitlines()
    assert lines[2] == "FINE1" and count("fine1") == 1
    # A 500 from user code is not retried; it is only run once more on its own (unbatched).
    assert "this record is broken" in json.loads(lines[1])["error"] and count("broken1") == 2
    if retries == 3:
        assert lines[0] == "FLAKY1" and count("flaky1") == 3 and report.failed_records == 1
    else:
        assert json.loads(lines[0])["error"] == "try again later" and count("flaky1") == 2
        # A transient failure leaves the object unfinished, so a re-run retries it.
        again = run_transform(model=str(archive), input=str(inp), output=str(out), split_type="Line",
                              content_type="text/plain", assemble_with="Line", env={"CALLS_DIR": str(calls)},
                              invocations_max_retries=retries)
        assert again.skipped == 0 and (out / "a.txt.out").read_text().splitlines()[0] == "FLAKY1"


STUCK = """
import os
import time
from pathlib import Path

def handler(data, context):
    calls = Path(os.environ["CALLS_DIR"])
    (calls / f"started-{len(list(calls.glob('started-*')))}").touch()
    # Stuck until the test lets go (at most a minute, so no thread outlives the session).
    for _ in range(1200):
        if (calls / "release").exists():
            break
        time.sleep(0.05)
    (calls / f"finished-{len(list(calls.glob('finished-*')))}").touch()
    return b"late", "text/plain"
"""


def test_invocations_timeout(tmp_path, slow_model, with_script):
    inp, out, calls = tmp_path / "in", tmp_path / "out", tmp_path / "calls"
    inp.mkdir()
    calls.mkdir()
    (inp / "a.json").write_bytes(b"[1, 2]")
    # The slow model sleeps 0.25 s per batch; a timeout longer than that never fires for it...
    ok = run_transform(model=str(slow_model), input=str(inp), output=str(out), content_type="application/json",
                       invocations_timeout=5)
    assert ok.ok
    # ...but a handler stuck for longer than the timeout does, and is retried then failed.
    archive = with_script(tmp_path, slow_model, STUCK)
    try:
        late = run_transform(model=str(archive), input=str(inp), output=str(tmp_path / "late"),
                             env={"CALLS_DIR": str(calls)}, invocations_timeout=1, invocations_max_retries=1)
        assert not late.ok and late.errors[0]["error"].startswith("invocation did not answer within")
        # Two attempts, and the job did not wait for either of them to come back.
        assert sorted(p.name for p in calls.iterdir()) == ["started-0", "started-1"]
    finally:
        (calls / "release").touch()


def _same_but_bad(output: Path, clean: Path, records: int, bad: set[int], says: str) -> None:
    """``output`` has ``records`` lines, line N answering record N: an error line naming it (its
    message holding ``says``) for each bad one, else the clean run's prediction."""
    got, want = output.read_text().splitlines(), clean.read_text().splitlines()
    assert len(got) == len(want) == records
    for n, line in enumerate(got):
        if n in bad:
            assert json.loads(line)["record"] == n and says in json.loads(line)["error"]
        else:
            np.testing.assert_allclose(json.loads(line)["predictions"], json.loads(want[n])["predictions"])


@pytest.mark.parametrize("strategy", ["MultiRecord", "SingleRecord"])
def test_the_records_of_a_failed_payload_run_again_many_to_a_hop(tmp_path, linear_model, strategy):
    # Every 50th line has a text cell: each request that holds one fails (a MultiRecord payload,
    # or SingleRecord lines joined into one request), and its records run again alone. They
    # had gone to the handler workers one round trip each (289 and 363 hops here, then 17 and 51).
    inp, out, clean_out = tmp_path / "in", tmp_path / "out", tmp_path / "clean-out"
    rows = [f"{i},{i % 7},{i % 5}" for i in range(600)]
    bad = {n for n in range(600) if n % 50 == 7}
    inp.mkdir()
    (inp / "t.csv").write_text("".join((r.replace(",", ",oops,", 1) if n in bad else r) + "\n"
                                       for n, r in enumerate(rows)))
    (tmp_path / "clean").mkdir()
    (tmp_path / "clean" / "t.csv").write_text("".join(r + "\n" for r in rows))
    # Two handler workers whatever the machine: a hop is a round trip to each worker.
    args = dict(model=str(linear_model), split_type="Line", batch_strategy=strategy, content_type="text/csv",
                assemble_with="Line", handler_workers=2)
    report = run_transform(input=str(inp), output=str(out), **args)
    run_transform(input=str(tmp_path / "clean"), output=str(clean_out), **args)
    assert report.records == 600 and report.failed_records == len(bad)
    _same_but_bad(out / "t.csv.out", clean_out / "t.csv.out", 600, bad, "string")
    (stats,) = json.loads((out / "_tfbatch" / "report.json").read_text())["batches"].values()
    assert stats["predict"] == "handler-pool" and stats["hops"] < 120, stats["hops"]


COUNTING_CSV = """
import json
import os


def input_handler(data, context):
    lines = data.read().decode().splitlines()
    with open(os.path.join(os.environ["CALLS_DIR"], "lines"), "a") as calls:
        calls.write("%d\\n" % len(lines))
    return json.dumps({"instances": [[float(x) for x in line.split(",")] for line in lines]})


def output_handler(response, context):
    if response.status_code != 200:
        raise ValueError(response.content.decode())
    return response.content, context.accept_header
"""


def test_a_failed_payload_of_lines_goes_again_in_parts(tmp_path, linear_model, with_script):
    # 600 CSV lines in one MultiRecord payload, a bad line every 50 (the script's float()
    # refuses it). The payload goes again in parts of 16 lines, each part that fails in parts of
    # 4, and those that fail line by line: the script sees far fewer requests than 600 singles,
    # and every line still answers its record as a clean run does.
    rows = [f"{i},{i % 7},{i % 5}" for i in range(600)]
    bad = {n for n in range(600) if n % 50 == 7}
    for name, lines in (("in", [r.replace(",", ",oops,", 1) if n in bad else r for n, r in enumerate(rows)]),
                        ("clean", rows)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "t.csv").write_text("".join(line + "\n" for line in lines))
    archive = with_script(tmp_path, linear_model, COUNTING_CSV)
    results = {}
    for name in ("in", "clean"):
        calls = tmp_path / f"calls-{name}"
        calls.mkdir()
        report = run_transform(model=str(archive), input=str(tmp_path / name), output=str(tmp_path / f"out-{name}"),
                               split_type="Line", batch_strategy="MultiRecord", content_type="text/csv",
                               assemble_with="Line", env={"CALLS_DIR": str(calls)})
        results[name] = report, [int(x) for x in (calls / "lines").read_text().split()]
    report, sizes = results["in"]
    assert report.records == 600 and report.failed_records == len(bad)
    assert results["clean"][1] == [600]
    # 1 payload, 38 parts (37 of 16 lines, 1 of 8), the 12 failed ones in 4 parts of 4, then the
    # 12 failed parts' 48 lines alone: 135 requests where one line a request made 601.
    assert sorted(sizes, reverse=True) == [600] + [16] * 37 + [8] + [4] * 48 + [1] * 48
    _same_but_bad(tmp_path / "out-in" / "t.csv.out", tmp_path / "out-clean" / "t.csv.out", 600, bad, "oops")


def test_bad_records_among_many_in_one_hop_each_fail_alone(tmp_path, failing_model):
    # 64 one-record objects, four of them bad (the model refuses a negative value). A hop's
    # joint model call fails; its halves are called jointly again, down to the bad records
    # alone, and each good record gets its own answer.
    inp, out = tmp_path / "in", tmp_path / "out"
    inp.mkdir()
    bad = {5, 21, 22, 63}
    for i in range(64):
        (inp / f"{i:02d}.json").write_text(json.dumps([-1.0 if i in bad else float(i), 1.0]))
    report = run_transform(model=str(failing_model), input=str(inp), output=str(out),
                           content_type="application/json", max_batch_size=64)
    assert report.failed == len(bad) and report.succeeded == 64 - len(bad)
    for i in range(64):
        target = out / f"{i:02d}.json.out"
        if i in bad:
            assert not target.exists()
        else:
            assert json.loads(target.read_text()) == {"predictions": [[i + 1.0, 2.0]]}
    errors = [json.loads(x) for x in (out / "_tfbatch" / "errors.jsonl").read_text().splitlines()]
    assert sorted(e["object"] for e in errors) == [f"{i:02d}.json" for i in sorted(bad)]
    assert all("negative input" in e["error"] for e in errors)
    (stats,) = json.loads((out / "_tfbatch" / "report.json").read_text())["batches"].values()
    assert stats["failed_joint_calls"] >= 1 and stats["requests_run_alone"] < 32, stats
