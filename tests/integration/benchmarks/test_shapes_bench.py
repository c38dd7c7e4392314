"""The job-shape harness end to end on a small shape: real processes for every contender
(the tfbatch CLI, the tf.data script, the TFS-style server and its agent), outputs read back
and compared row by row, the half-job steady figures of a few-object shape, the table.

CSV lines (10 objects, so a half job too) from local files; then the SageMaker guide's
DataProcessing job (an id column filtered out, joined back, filtered with the prediction: the
expert's id decoding and the agent's per-record filters) with ``--storage s3 --s3-outputs``:
a moto server process on loopback, every contender reading its objects from it and writing its
outputs back to it (the tf.data script and the agent through their upload threads, tfbatch with
its own writers), the outputs read back from the server and compared row by row, the half job
under its own prefix. Image jobs run through all three kinds of contender in
test_transform_bench.py (the first harness)."""

from __future__ import annotations

import json

import pytest

from benchmarks.transform import shapes

pytestmark = pytest.mark.timeout(600)


def _run(root, *flags: str):
    out = root / "shapes.json"
    code = shapes.main([*flags, "--scale", "0.004", "--table-scale", "0.02",
                        "--workdir", str(root / "work"), "--out", str(out), "--timeout", "300"])
    return code, json.loads(out.read_text()), out.with_suffix(".md").read_text()


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("shapes"), "--shapes", "csv")


@pytest.fixture(scope="module")
def on_s3(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("shapes-s3"), "--shapes", "csv-id", "--storage", "s3", "--s3-outputs")


def test_every_contender_agrees_with_the_tfdata_script(results):
    code, data, _ = results
    assert code == 0
    for name in ("csv",):
        runs = {r["contender"]: r for r in data["shapes"][name]["runs"]}
        assert sorted(runs) == ["a", "b", "c"]
        for c, run in runs.items():
            assert run["ok"], (name, c, run["error"])
            assert run["records"] == data["shapes"][name]["records"]
            if c != "b":
                assert run["agreement_with_b"]["same"], (name, c, run["agreement_with_b"])


def test_few_object_shapes_measure_a_half_job_too(results):
    _, data, _ = results
    csv_a = next(r for r in data["shapes"]["csv"]["runs"] if r["contender"] == "a")
    assert csv_a["steady_method"] == "whole job minus half job"
    assert csv_a["half"]["objects"] == 10 and csv_a["half"]["ok"]


def test_the_table_has_a_row_per_shape_with_both_ratios(results):
    _, _, md = results
    rows = [line for line in md.splitlines() if line.startswith("| csv")]
    assert len(rows) == 1
    assert all(line.count("×") == 8 and "yes, yes" in line for line in rows)


def test_every_contender_reads_and_writes_s3_and_agrees(on_s3):
    code, data, _ = on_s3
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


def test_the_report_says_where_the_outputs_went(on_s3):
    _, _, md = on_s3
    assert "outputs on the same server, each run under its own prefix" in md
    row = next(line for line in md.splitlines() if line.startswith("| csv-id"))
    assert row.count("×") == 8 and "yes, yes" in row
