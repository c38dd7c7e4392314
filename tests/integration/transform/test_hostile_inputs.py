"""Hostile objects in a real transform job: each fails by name as bad input, the rest succeed."""

from __future__ import annotations

import gzip
import io
import json

import numpy as np
import pytest
from PIL import Image

from tfbatch.testing.hostile import png_bomb
from tfbatch.testing.models import make_image_bytes_model
from tfbatch import run_transform


@pytest.fixture(scope="module")
def image_model(tmp_path_factory):
    root = tmp_path_factory.mktemp("image-model")
    make_image_bytes_model(root / "1", size=8, channels=1, classes=10)
    return root


def _errors(out) -> dict[str, dict]:
    lines = (out / "_tfbatch" / "errors.jsonl").read_text().splitlines()
    return {e["object"]: e for e in map(json.loads, lines)}


def test_png_bomb_and_empty_image_are_bad_input_named(tmp_path, image_model):
    inp, out = tmp_path / "in", tmp_path / "out"
    inp.mkdir()
    buf = io.BytesIO()
    Image.fromarray(np.zeros((8, 8), np.uint8)).save(buf, format="PNG")
    (inp / "good.png").write_bytes(buf.getvalue())
    (inp / "bomb.png").write_bytes(png_bomb())
    (inp / "empty.png").write_bytes(b"")
    report = run_transform(model=str(image_model), input=str(inp), output=str(out), content_type="image/png")
    assert report.succeeded == 1 and report.failed == 2
    assert (out / "good.png.out").exists()
    assert not (out / "bomb.png.out").exists() and not (out / "empty.png.out").exists()
    errors = _errors(out)
    assert errors["bomb.png"]["status"] == 400
    assert "13000 x 13000" in errors["bomb.png"]["error"] and "--max-image-pixels" in errors["bomb.png"]["error"]
    assert errors["empty.png"]["status"] == 400
    assert "empty.png: empty object (0 bytes)" in errors["empty.png"]["error"]


def test_gzip_bomb_object_fails_by_name_and_the_job_goes_on(tmp_path, linear_model):
    inp, out = tmp_path / "in", tmp_path / "out"
    inp.mkdir()
    (inp / "fine.json.gz").write_bytes(gzip.compress(b'{"instances": [[1, 2, 3]]}'))
    member = gzip.compress(b"\0" * (1 << 20))
    (inp / "bomb.json.gz").write_bytes(member * 64)  # 64 KiB on disk, 64 MiB inflated
    report = run_transform(model=str(linear_model), input=str(inp), output=str(out), compression="Gzip",
                           content_type="application/json", max_payload_mb=1)
    assert report.succeeded == 1 and report.failed == 1
    error = _errors(out)["bomb.json.gz"]
    assert error["status"] == 413
    assert error["error"].startswith("bomb.json.gz record 0 at byte 0:")
    assert "record limit of 1048576 bytes (MaxPayloadInMB=1)" in error["error"]


def test_symlink_diamond_is_processed_once_and_folder_links_on_request(tmp_path, linear_model):
    import os

    inp, outside = tmp_path / "in", tmp_path / "shared"
    (inp / "a").mkdir(parents=True)
    outside.mkdir()
    (inp / "a" / "x.json").write_bytes(b"[1, 2, 3]")
    os.symlink(inp / "a" / "x.json", inp / "alias.json")
    os.symlink(inp / "a", inp / "a-again")
    (outside / "s.json").write_bytes(b"[4, 5, 6]")
    os.symlink(outside, inp / "ext")
    common = dict(model=str(linear_model), input=str(inp), content_type="application/json")
    report = run_transform(output=str(tmp_path / "o1"), **common)
    assert report.ok and report.objects == 1
    assert sorted(p.name for p in (tmp_path / "o1").rglob("*.out")) == ["x.json.out"]
    report = run_transform(output=str(tmp_path / "o2"), follow_symlinks=True, **common)
    assert report.ok and report.objects == 2
    assert (tmp_path / "o2" / "ext" / "s.json.out").exists()


def test_output_prefix_equal_to_input_is_refused_before_any_work(tmp_path, linear_model):
    from tfbatch.errors import ConfigError

    inp = tmp_path / "in"
    inp.mkdir()
    (inp / "x.json").write_bytes(b"[1, 2, 3]")
    with pytest.raises(ConfigError) as info:
        run_transform(model=str(linear_model), input=str(inp), output=str(inp) + "/", content_type="application/json")
    assert f"output prefix '{inp}/' is the input prefix '{inp}'" in str(info.value)
    assert sorted(p.name for p in inp.iterdir()) == ["x.json"]  # no _tfbatch/, no .out
