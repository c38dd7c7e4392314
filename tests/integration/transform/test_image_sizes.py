"""Image jobs whose model fixes no image size, or takes a batch of one (a fully convolutional
Keras export, an object-detection export): the dataflow's image batch predict
(transform/predict.py) decodes each image at its own size, runs the same-size images of a hop
as one batch (one image per call for a batch of one) and answers what the model gives for that
image alone."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tfbatch import run_transform
from tfbatch.testing.models import make_detection_model, make_keras_image_model

# (width, height, format). Three sizes repeat, so a hop holds batches of several images; the
# three large ones (2.9 + 3.6 + 2.9 megapixels) pass the per-hop pixel slice (SLICE_PIXELS,
# 8 million), so their hop is decoded and run in two slices: img00-img07 (6.5 megapixels),
# then img08-img09 and cut.jpg.
IMAGES = [(40, 30, "PNG"), (40, 30, "JPEG"), (64, 48, "JPEG"), (40, 30, "PNG"), (17, 23, "PNG"),
          (64, 48, "PNG"), (2400, 1200, "JPEG"), (2000, 1800, "PNG"), (2400, 1200, "PNG"), (40, 30, "JPEG")]


def _image(i: int, width: int, height: int, fmt: str) -> bytes:
    rng = np.random.default_rng(i)
    ramp = np.linspace(0, 200, width, dtype=np.float32)[None, :, None] + rng.integers(0, 40, (1, 1, 3))
    noise = 16 if width * height < 100_000 else 3  # the large PNGs stay within the 6 MB payload limit
    pixels = (ramp + rng.integers(0, noise, (height, width, 3))).clip(0, 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format=fmt, **({"quality": 90} if fmt == "JPEG" else {}))
    return buf.getvalue()


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("sizes") / "in"
    root.mkdir()
    for i, (w, h, fmt) in enumerate(IMAGES):
        (root / f"img{i:02d}.{fmt.lower()}").write_bytes(_image(i, w, h, fmt))
    # A sound JPEG header (it passes the header check) whose data stops: only the decode finds out.
    whole = _image(99, 64, 48, "JPEG")
    (root / "cut.jpg").write_bytes(whole[: len(whole) // 3])
    return root


def _pixels(path: Path) -> np.ndarray:
    with Image.open(path) as img:
        return np.asarray(img.convert("RGB"))[None]  # PIL decodes JPEG as libjpeg's accurate DCT does


def _stats(report) -> dict:
    (stats,) = report.to_dict()["batches"].values()
    return stats


def _run(model: Path, inputs: Path, out: Path):
    report = run_transform(model=str(model), input=str(inputs), output=str(out),
                           content_type="application/x-image", max_batch_size=16)
    assert report.succeeded == len(IMAGES) and report.failed == 1
    errors = (out / "_tfbatch" / "errors.jsonl").read_text()
    assert "cut.jpg" in errors and "could not be decoded past its header" in errors
    assert not (out / "cut.jpg.out").exists()
    return report


def test_a_model_of_any_image_size_gets_each_image_at_its_size_in_same_size_batches(tmp_path, inputs):
    import tensorflow as tf

    model = make_keras_image_model(tmp_path / "m" / "1", size=None)
    report = _run(tmp_path / "m", inputs, tmp_path / "out")
    stats = _stats(report)
    assert stats["predict"] == "image-batch"
    sizes = {int(k): v for k, v in stats["batch_sizes"].items()}
    # One hop of all 11 objects in two slices: 40x30 x3 and 64x48 x2 in the first, the rest alone.
    assert sizes == {3: 1, 2: 1, 1: 5}
    serve = tf.saved_model.load(str(model)).signatures["serving_default"]
    for path in sorted(inputs.glob("img*")):
        expected = serve(tf.constant(_pixels(path).astype(np.float32) / 255.0))["output_0"].numpy()
        got = json.loads((tmp_path / "out" / f"{path.name}.out").read_bytes())
        np.testing.assert_allclose(got["predictions"], expected, rtol=1e-5, atol=1e-6, err_msg=path.name)


def test_a_batch_of_one_detection_export_runs_one_image_per_call(tmp_path, inputs):
    import tensorflow as tf

    model = make_detection_model(tmp_path / "det" / "1")
    report = _run(tmp_path / "det", inputs, tmp_path / "out")
    stats = _stats(report)
    assert stats["predict"] == "image-batch"
    assert {int(k): v for k, v in stats["batch_sizes"].items()} == {1: len(IMAGES)}
    serve = tf.saved_model.load(str(model)).signatures["serving_default"]
    for path in sorted(inputs.glob("img*")):
        expected = {k: v.numpy()[0] for k, v in serve(input_tensor=tf.constant(_pixels(path))).items()}
        (row,) = json.loads((tmp_path / "out" / f"{path.name}.out").read_bytes())["predictions"]
        assert sorted(row) == sorted(expected)
        for key, value in expected.items():
            np.testing.assert_allclose(row[key], value, rtol=1e-6, err_msg=f"{path.name} {key}")
