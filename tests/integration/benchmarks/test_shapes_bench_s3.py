"""The job-shape harness with inputs and outputs on an S3 server (``--storage s3 --s3-outputs``):
a moto server process on loopback, every contender reading its objects from it and writing its
outputs back to it (the tf.data script and the agent through their upload threads, tfbatch with
its own writers), the outputs read back from the server and compared row by row.

The SageMaker guide's DataProcessing job on CSV lines (10 objects, so a half job under its own
prefix too): objects split into records, the agent's per-record filters, the expert's
downloaded shards."""

from __future__ import annotations

import json

import pytest

from benchmarks.transform import shapes

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    root = tmp_path_factory.mktemp("shapes-s3")
    out = root / "shapes.json"
    code = shapes.main(["--shapes", "csv-id", "--scale", "0.004", "--table-scale", "0.02",
                        "--storage", "s3", "--s3-outputs",
                        "--workdir", str(root / "work"), "--out", str(out), "--timeout", "300"])
    return code, json.loads(out.read_text()), out.with_suffix(".md").read_text()


def test_every_contender_reads_and_writes_s3_and_agrees(results):
    code, data, _ = results
    assert code == 0
    assert data["storage"] == {"kind": "s3", "latency_ms": 0.0, "outputs": True}
    runs = {r["contender"]: r for r in data["shapes"]["csv-id"]["runs"]}
    assert sorted(runs) == ["a", "b", "c"]
    for c, run in runs.items():
        assert run["ok"], (c, run["error"])
        command = " ".join(run["command"])
        assert "--input s3://tfbatch-bench/csv-id/" in command, command
        assert "--output s3://tfbatch-bench/outputs/csv-id-" + c in command, command
        assert run["objects"] == 20 and run["records"] == data["shapes"]["csv-id"]["records"]
        assert run["steady_method"] == "whole job minus half job"
        assert run["half"]["ok"] and run["half"]["objects"] == 10
        assert "s3://tfbatch-bench/csv-id-half/" in " ".join(run["half"]["command"])
        if c != "b":
            assert run["agreement_with_b"]["same"], (c, run["agreement_with_b"])


def test_the_report_says_where_the_outputs_went(results):
    _, _, md = results
    assert "outputs on the same server, each run under its own prefix" in md
    row = next(line for line in md.splitlines() if line.startswith("| csv-id"))
    assert row.count("×") == 8 and "yes, yes" in row
