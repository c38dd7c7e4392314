"""The whole harness, end to end, on a tiny model and a handful of images.

Real processes all the way: the tfbatch CLI, the tf.data baseline, the HTTP server and its
64-thread client; the test checks that every contender wrote one correct output per image.
"""

from __future__ import annotations

import json

import pytest

from benchmarks.transform import bench as transform_bench
from benchmarks.transform.http_baseline import load_script
from benchmarks.common.models import archive_path, ensure_artifact

pytestmark = pytest.mark.timeout(240)

IMAGES = 6


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    root = tmp_path_factory.mktemp("bench")
    out = root / "results" / "results.json"
    code = transform_bench.main([
        "--models", "tiny", "--images", str(IMAGES), "--workdir", str(root / "work"), "--out", str(out),
        "--timeout", "180",
    ])
    return code, json.loads(out.read_text()), out.with_suffix(".md").read_text(), root / "work"


def test_every_contender_writes_one_agreeing_output_per_image(results):
    code, data, _, _ = results
    runs = {r["contender"]: r for r in data["models"]["tiny"]["runs"]}
    assert sorted(runs) == ["a", "b", "c"]
    for name, run in runs.items():
        assert run["ok"], (name, run["error"])
        assert run["outputs"] == IMAGES
        assert run["peak_rss_mb"] > 50  # a TensorFlow process was seen
        assert run["cpu_s"] > 0.5
    for name in ("a", "c"):
        agree = runs[name]["extra"]["agreement_with_b"]
        assert agree["files"] == IMAGES and agree["same_class"] == IMAGES
        assert agree["max_abs_prob_diff"] < 1e-4
    assert code == 0


def test_outputs_are_tfs_json_named_after_inputs(results):
    _, _, _, work = results
    inputs = sorted(p.name for p in next(work.glob("dataset-*")).joinpath("images").iterdir())
    for contender in "abc":
        outputs = sorted(p.name for p in (work / "outputs" / "tiny" / contender).glob("*.out"))
        assert outputs == [name + ".out" for name in inputs]
        row = json.loads((work / "outputs" / "tiny" / contender / outputs[0]).read_bytes())["predictions"][0]
        assert len(row["probabilities"]) == 10 and 0 <= row["classes"] < 10


def test_markdown_table_and_ratios(results):
    _, data, md, _ = results
    assert set(data["models"]["tiny"]["ratios"]) == {"a/b", "a/c"}
    assert "| (a) tfbatch transform (CLI) |" in md and "| (c) HTTP per image, SageMaker-style |" in md
    assert data["command"] in md
    assert data["machine"]["cpus"] >= 1


def test_artifact_carries_the_seed_style_handler(results):
    _, _, _, work = results
    script = load_script(archive_path(ensure_artifact("tiny", work)))
    assert callable(script.input_handler) and callable(script.output_handler)
