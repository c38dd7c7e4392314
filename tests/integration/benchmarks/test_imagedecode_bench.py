"""The image decode harness end to end on a few images: every contender, results written."""

from __future__ import annotations

import json

from benchmarks.transform import imagedecode


def test_harness_runs_every_contender_and_agrees_with_pil(tmp_path):
    code = imagedecode.main(["--images", "24", "--batch", "8", "--rounds", "1", "--out", str(tmp_path)])
    assert code == 0
    data = json.loads((tmp_path / "imagedecode.json").read_text())
    results = data["results"]
    workers = data["workers"]
    assert set(results) == {"pil_per_object", f"pil_per_object_{workers}_threads", "tf_decoder_batches_of_8",
                            "tf_decoder_per_object"}
    assert results["pil_per_object"]["max_levels_from_pil"] == 0
    for name, result in results.items():
        assert result["max_levels_from_pil"] <= 1, name  # the decoder's documented tolerance
        assert result["img_per_s_median"] > 0 and 0 < result["python_thread_share"]
    assert 18 * 1024 <= data["mean_bytes"] <= 26 * 1024
    assert "| tf_decoder_batches_of_8 |" in (tmp_path / "imagedecode.md").read_text()
