"""The dataflow (transform/dataflow.py): objects read and split together, requests from many
objects in one hop, and the same bytes and errors as one request at a time in this process."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tfbatch import run_transform
from tfbatch.testing.models import linear_expected
from tfbatch.transform import dataflow

COUNTING = """
import json, os, pathlib

def input_handler(data, context):
    body = data.read().decode()
    marker = pathlib.Path(os.environ["CALLS_DIR"]) / body.strip()
    marker.write_text(str(int(marker.read_text()) + 1 if marker.exists() else 1))
    if "bad" in body:
        raise ValueError("bad record " + body.strip())
    return json.dumps({"instances": [[len(body), 1.0, 2.0]]})

def output_handler(response, context):
    return response.content, context.accept_header
"""


def _jsonl_objects(folder: Path, name: str, *, objects: int, lines: int) -> Path:
    """``folder`` with ``<name>-<f>.jsonl`` objects of ``lines`` lines ``[f, i, 1.0]``."""
    folder.mkdir()
    for f in range(objects):
        (folder / f"{name}-{f}.jsonl").write_bytes(b"".join(json.dumps([f, i, 1.0]).encode() + b"\n"
                                                           for i in range(lines)))
    return folder


def _outs(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*.out"))
            if "_tfbatch" not in p.parts}


def test_split_records_from_many_objects_share_hops_and_match_the_in_process_path(tmp_path, linear_model):
    inp = _jsonl_objects(tmp_path / "in", "part", objects=6, lines=9)
    common = dict(model=str(linear_model), input=str(inp), split_type="Line", content_type="application/json",
                  assemble_with="Line", max_batch_size=16)
    pooled = run_transform(output=str(tmp_path / "pooled"), handler_workers=2, **common)
    alone = run_transform(output=str(tmp_path / "alone"), handler_workers=0, **common)
    assert pooled.ok and alone.ok and pooled.records == alone.records == 54
    (stats,) = pooled.batches.values()
    # 54 records of 6 objects, each object's 9 lines one joined request (SingleRecord lines with
    # no script, records/payloads.py join_single), in hops of 16 requests: the model saw
    # records of several objects at once.
    assert stats["lane"] == "dataflow" and stats["predict"] == "handler-pool" and stats["rows"] == 6
    assert stats["batches"] < 6 and stats["objects"] == 6 and stats["objects_streamed"] == 0
    (in_process,) = alone.batches.values()
    # --handler-workers 0: the same hops, the default handling on a thread of this process.
    assert in_process["predict"] == "handler-pool" and in_process["hooks"] == "in-process (--handler-workers 0)"
    assert in_process["handler_workers"] == 0 and in_process["batches"] < 6
    a, b = _outs(tmp_path / "pooled"), _outs(tmp_path / "alone")
    assert set(a) == set(b) and len(a) == 6
    for key in a:
        ours = [json.loads(x)["predictions"][0] for x in a[key].splitlines()]
        theirs = [json.loads(x)["predictions"][0] for x in b[key].splitlines()]
        np.testing.assert_allclose(ours, theirs, rtol=1e-5)
    f = 3
    expected = linear_expected(np.array([[f, i, 1.0] for i in range(9)], np.float32))
    got = [json.loads(x)["predictions"][0] for x in a["part-3.jsonl.out"].splitlines()]
    np.testing.assert_allclose(got, expected, rtol=1e-5)


def test_a_bad_record_costs_its_line_and_good_records_run_once(tmp_path, linear_model, with_script):
    inp, calls = tmp_path / "in", tmp_path / "calls"
    inp.mkdir()
    calls.mkdir()
    (inp / "a.txt").write_bytes(b"one\nbad1\nthree\n")
    (inp / "b.txt").write_bytes(b"four\nfive\n")
    archive = with_script(tmp_path, linear_model, COUNTING)
    report = run_transform(model=str(archive), input=str(inp), output=str(tmp_path / "out"), split_type="Line",
                           content_type="text/plain", assemble_with="Line", env={"CALLS_DIR": str(calls)},
                           handler_workers=2)
    lines = (tmp_path / "out" / "a.txt.out").read_text().splitlines()
    assert len(lines) == 3 and "bad record bad1" in json.loads(lines[1])["error"]
    assert report.failed_records == 1 and report.records == 3 + 2
    # Every record ran once. The failed one's answer is its own (its input_handler failed, no
    # model call held other rows), so it is not run again isolated; it had been, once.
    counts = {p.name: int(p.read_text()) for p in calls.iterdir()}
    assert counts == {"one": 1, "bad1": 1, "three": 1, "four": 1, "five": 1}


def test_an_object_larger_than_the_flow_holds_is_streamed(tmp_path, linear_model, monkeypatch):
    inp = tmp_path / "in"
    inp.mkdir()
    small = b"".join(json.dumps([1, i, 1.0]).encode() + b"\n" for i in range(4))
    big = b"".join(json.dumps([2, i, 1.0]).encode() + b"\n" for i in range(400))
    (inp / "small.jsonl").write_bytes(small)
    (inp / "big.jsonl").write_bytes(big)
    monkeypatch.setattr(dataflow, "MAX_OBJECT_BYTES", len(big) - 1)  # the job runs in this process
    report = run_transform(model=str(linear_model), input=str(inp), output=str(tmp_path / "out"), split_type="Line",
                           content_type="application/json", assemble_with="Line", handler_workers=0)
    assert report.ok and report.records == 404
    (stats,) = report.batches.values()
    assert stats["objects_streamed"] == 1 and stats["objects"] == 1
    got = [json.loads(x)["predictions"][0] for x in (tmp_path / "out" / "big.jsonl.out").read_text().splitlines()]
    np.testing.assert_allclose(got, linear_expected(np.array([[2, i, 1.0] for i in range(400)], np.float32)),
                               rtol=1e-5)


@pytest.fixture(scope="module")
def batch_size_model(tmp_path_factory) -> Path:
    """serving_default: ``x`` float32 [None, 3] -> ``echo`` (its first column) and ``rows`` (each
    row the size of its model call)."""
    import tensorflow as tf

    class Rows(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
        def serve(self, x):
            return {"echo": x[:, :1], "rows": tf.fill([tf.shape(x)[0], 1], tf.shape(x)[0])}

    root = tmp_path_factory.mktemp("rows")
    module = Rows()
    tf.saved_model.save(module, str(root / "1"), signatures={"serving_default": module.serve})
    return root


def test_a_streamed_object_goes_to_the_model_in_hops(tmp_path, batch_size_model, with_script, monkeypatch):
    """An object too large for the flow to hold is streamed, its requests sent to the handler
    pool in the flow's hops (``Dataflow._streamed``), and answers what the flow answers, errors
    included, each record's script call made once."""
    lines = [f"line-{i}" if i != 37 else "bad37" for i in range(120)]
    inp = tmp_path / "in"
    inp.mkdir()
    (inp / "big.txt").write_text("\n".join(lines) + "\n")
    # COUNTING, sending each line's number, which the model echoes: the answers' order shows.
    archive = with_script(tmp_path, batch_size_model,
                          COUNTING.replace("[[len(body), 1.0, 2.0]]", "[[float(body.strip().split('-')[1]), 1.0, 2.0]]"))
    reports, sizes = {}, {}
    for how in ("flow", "streamed"):
        calls = tmp_path / f"calls-{how}"
        calls.mkdir()
        if how == "streamed":
            monkeypatch.setattr(dataflow, "MAX_OBJECT_BYTES", 100)  # the job runs in this process
        reports[how] = run_transform(model=str(archive), input=str(inp), output=str(tmp_path / how), split_type="Line",
                                     content_type="text/plain", assemble_with="Line", env={"CALLS_DIR": str(calls)},
                                     handler_workers=1)
        out = [json.loads(line) for line in (tmp_path / how / "big.txt.out").read_text().splitlines()]
        assert len(out) == 120 and "bad record bad37" in out[37]["error"], how
        assert [row["predictions"][0]["echo"] for n, row in enumerate(out) if n != 37] == \
            [[float(n)] for n in range(120) if n != 37], how
        sizes[how] = [row["predictions"][0]["rows"][0] for n, row in enumerate(out) if n != 37]
        counts = {p.name: int(p.read_text()) for p in calls.iterdir()}
        assert all(counts[line] == 1 for line in lines if line != "bad37"), how
        assert reports[how].failed_records == 1
    (stats,) = reports["streamed"].batches.values()
    assert stats["objects_streamed"] == 1
    # Several requests per model call: the flow's hops, of the size it sends a held object's
    # requests in (one request per model call had cost 2.5x the time on a big file:
    # benchmarks/transform/profile/streamed-hops.md).
    assert sum(size > 1 for size in sizes["streamed"]) > 100, sizes["streamed"]
    assert max(sizes["streamed"]) == max(sizes["flow"]), (sizes["streamed"], sizes["flow"])


def test_float_image_jobs_decode_a_hop_together_and_answer_what_one_request_answers(tmp_path):
    import io

    from PIL import Image

    from tfbatch.handlers.service import InferenceService, InvocationRequest
    from tfbatch.runtime import ModelServer
    from tfbatch.runtime.placement import usable_cores
    from tfbatch.testing.models import make_keras_image_model

    model = make_keras_image_model(tmp_path / "keras" / "1")
    inp = tmp_path / "in"
    inp.mkdir()
    rng = np.random.default_rng(5)
    for i in range(10):
        buf = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (48 + i, 80, 3), dtype=np.uint8)).save(buf, format="JPEG")
        (inp / f"{i}.jpg").write_bytes(buf.getvalue())
    (inp / "cut.jpg").write_bytes((inp / "0.jpg").read_bytes()[:300])  # sound header, data cut off
    report = run_transform(model=str(model.parent), input=str(inp), output=str(tmp_path / "out"),
                           content_type="application/x-image", max_batch_size=4)
    (stats,) = report.batches.values()
    assert stats["predict"] == "image-batch" and stats["rows"] == 10 and stats["objects_run_alone"] == 1
    assert report.succeeded == 10 and report.failed == 1 and "cut.jpg" in report.errors[0]["object"]
    # The decode's threads follow the instance's share of the cores: all of them here; each
    # of two processes gets half (on 16 cores, 4 processes had each started 16).
    assert stats["decode_workers"] == usable_cores()
    two = run_transform(model=str(model.parent), input=str(inp), output=str(tmp_path / "two"),
                        content_type="application/x-image", max_batch_size=4, processes=2)
    assert two.processes == 2 and two.succeeded == 10 and len(two.batches) == 2, two.summary()
    assert {s["decode_workers"] for s in two.batches.values()} == {max(1, usable_cores() // 2)}
    for i in range(10):
        assert (tmp_path / "two" / f"{i}.jpg.out").read_bytes() == (tmp_path / "out" / f"{i}.jpg.out").read_bytes()
    # The one-request path (the endpoint's) on each image alone.
    server = ModelServer({"model": {1: model}})
    try:
        service = InferenceService(server)
        for i in range(10):
            body = (inp / f"{i}.jpg").read_bytes()
            alone = service.invoke(InvocationRequest(body=body, content_type="application/x-image"))
            ours = json.loads((tmp_path / "out" / f"{i}.jpg.out").read_bytes())["predictions"]
            np.testing.assert_allclose(ours, json.loads(alone.body)["predictions"], rtol=1e-5, atol=1e-6)
    finally:
        server.close()


# Each record costs the hooks a millisecond: the probe times a size over at least
# autotune.POOL_MIN_WINDOW_S of wall time, and a job of the linear model alone ends before one
# window closes. The script imports TensorFlow, so its hooks run in the job's process on any
# machine (no worker pool growing with the cores), at most one hop per dataflow thread: the
# job lasts over a second wherever it runs, long enough to time two sizes.
SLOW_HOOKS = """
import json, time

import tensorflow  # noqa: F401

def input_handler(data, context):
    time.sleep(0.001)
    return json.dumps({"instances": [json.loads(data.read())]})

def output_handler(response, context):
    return response.content, context.accept_header
"""


def test_the_probe_sizes_the_hops_of_a_job_of_a_few_large_objects(tmp_path, linear_model, with_script):
    inp = _jsonl_objects(tmp_path / "in", "shard", objects=3, lines=1000)
    common = dict(model=str(with_script(tmp_path, linear_model, SLOW_HOOKS)), input=str(inp), split_type="Line",
                  content_type="application/json", assemble_with="Line")
    tuned = run_transform(output=str(tmp_path / "tuned"), **common)
    fixed = run_transform(output=str(tmp_path / "fixed"), max_batch_size=16, **common)
    assert tuned.ok and fixed.ok and tuned.records == fixed.records == 3000
    assert _outs(tmp_path / "tuned") == _outs(tmp_path / "fixed")
    (stats,) = tuned.batches.values()
    assert stats["predict"] == "handler-pool" and stats["chosen_by"] == {"max_batch_size": "tuner"}
    assert stats["hooks"].startswith("in-process")
    # One chunk holds all three objects: the probe timed more than one size all the same, each
    # hop formed at the size it handed out when a hop thread could take it.
    assert len(stats["autotune"]["ms_per_row"]) >= 2 and stats["rows"] == 3000
    (plain,) = fixed.batches.values()
    assert "autotune" not in plain and plain["batches"] >= 3000 // 16


# A payload's lines turned into one "instances" body, as the usual CSV/JSON Lines script does;
# no TensorFlow in the script, so where its hooks run is the core count's choice.
LINES_TO_INSTANCES = """
import json

def input_handler(data, context):
    rows = [json.loads(line) for line in data.read().decode().splitlines() if line.strip()]
    return json.dumps({"instances": rows})

def output_handler(response, context):
    return response.content, context.accept_header
"""


def test_payloads_of_many_records_run_their_hooks_in_worker_processes_from_two_cores(tmp_path, linear_model,
                                                                                     with_script):
    # MultiRecord with a SplitType: each request is a payload of many lines, and the hooks'
    # loop over them costs more than the payload's trip to a worker process
    # (handlers/inline_pool.in_process_reason): workers from the start on 2 cores, where one
    # record a request starts in process. The outputs are the in-process ones, byte for byte.
    from tfbatch.runtime.placement import usable_cores

    inp = _jsonl_objects(tmp_path / "in", "part", objects=4, lines=300)
    common = dict(model=str(with_script(tmp_path, linear_model, LINES_TO_INSTANCES)), input=str(inp),
                  split_type="Line", batch_strategy="MultiRecord", max_payload_mb=1, content_type="application/json",
                  assemble_with="Line")
    default = run_transform(output=str(tmp_path / "default"), **common)
    alone = run_transform(output=str(tmp_path / "alone"), handler_workers=0, **common)
    assert default.ok and alone.ok and default.records == alone.records == 1200
    assert _outs(tmp_path / "default") == _outs(tmp_path / "alone")
    (stats,) = default.batches.values()
    if usable_cores() >= 2:
        assert stats["handler_workers"] >= 1 and stats["hops"] > 0 and "hooks" not in stats, stats
    else:
        assert stats["handler_workers"] == 0 and "1 core(s)" in stats["hooks"], stats
    (alone_stats,) = alone.batches.values()
    assert alone_stats.get("handler_workers", 0) == 0, alone_stats
