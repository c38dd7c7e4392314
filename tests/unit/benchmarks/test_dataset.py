"""The benchmark dataset: Open-Images-like sizes, real photos, deterministic."""

from __future__ import annotations

import io
import json
import re

from PIL import Image

from benchmarks.common import dataset


def test_files_are_jpegs_in_size_range_and_deterministic(tmp_path):
    first = dataset.generate(tmp_path / "one", 5, seed=7)
    second = dataset.generate(tmp_path / "two", 5, seed=7)
    assert [f.name for f in first] == [f.name for f in second]
    for info in first:
        data = (tmp_path / "one" / info.name).read_bytes()
        assert data == (tmp_path / "two" / info.name).read_bytes()
        assert dataset.MIN_BYTES <= len(data) <= dataset.MAX_BYTES, info
        assert re.fullmatch(r"[0-9a-f]{16}\.jpg", info.name)
        image = Image.open(io.BytesIO(data))
        assert image.format == "JPEG" and image.mode == "RGB"
        assert image.size == (info.width, info.height)


def test_smooth_wide_crop_at_the_size_cap_still_reaches_the_range():
    # Seed 0, image 497: a wide crop of skimage's clock stays under 100 KB at 2048 px wide
    # until the quality goes up.
    data, info = dataset.make_jpeg(0, 497)
    assert info.source == "skimage.clock" and info.width == dataset.MAX_SIDE
    assert dataset.MIN_BYTES <= len(data) <= dataset.MAX_BYTES


def test_other_seed_gives_other_files():
    a, _ = dataset.make_jpeg(0, 3)
    b, _ = dataset.make_jpeg(1, 3)
    assert a != b


def test_sources_are_real_photos_from_both_packages():
    names = [name for name, _ in dataset.source_photos()]
    assert any(n.startswith("skimage.") for n in names)
    assert {"sklearn.china.jpg", "sklearn.flower.jpg"} <= set(names)
    assert all(photo.ndim == 3 and photo.shape[2] == 3 for _, photo in dataset.source_photos())


def test_ensure_dataset_keeps_manifest_out_of_the_inputs_and_reuses(tmp_path):
    images = dataset.ensure_dataset(tmp_path / "ds", 3, seed=1)
    assert sorted(p.suffix for p in images.iterdir()) == [".jpg"] * 3
    meta = json.loads((tmp_path / "ds" / "dataset.json").read_text())
    assert meta["summary"]["in_range"] == 3
    stamps = {p.name: p.stat().st_mtime_ns for p in images.iterdir()}
    again = dataset.ensure_dataset(tmp_path / "ds", 3, seed=1)
    assert {p.name: p.stat().st_mtime_ns for p in again.iterdir()} == stamps


def test_cli_writes_count_files(tmp_path, capsys):
    assert dataset.main(["--out", str(tmp_path), "--count", "2", "--seed", "3"]) == 0
    assert len(list(tmp_path.glob("*.jpg"))) == 2
    assert json.loads(capsys.readouterr().out)["count"] == 2
