"""The job-shape harness end to end on a small shape: real processes for every contender
(the tfbatch CLI, the tf.data script, the TFS-style server and its agent), outputs read back
and compared row by row, the half-job steady figures of a few-object shape, the table.

CSV lines (10 objects, so a half job too) from local files; the SageMaker guide's
DataProcessing job (an id column filtered out, joined back, filtered with the prediction: the
expert's id decoding and the agent's per-record filters) runs with its inputs and outputs on
an S3 server in test_shapes_bench_s3.py; image jobs run through all three kinds of contender
in test_transform_bench.py (the first harness)."""

from __future__ import annotations

import json

import pytest

from benchmarks.transform import shapes

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    root = tmp_path_factory.mktemp("shapes")
    out = root / "shapes.json"
    code = shapes.main(["--shapes", "csv", "--scale", "0.004", "--table-scale", "0.02",
                        "--workdir", str(root / "work"), "--out", str(out), "--timeout", "300"])
    return code, json.loads(out.read_text()), out.with_suffix(".md").read_text()


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
