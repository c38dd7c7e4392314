"""No script, a Keras float-input model ([None, 64, 64, 3]): image bodies decoded by tfbatch.

The endpoint's service and a batch job both decode through tfbatch.records.imagedecode;
their answers are the model's outputs on a PIL decode of the same bytes (the path they
replaced), within what one level of resize rounding moves a softmax.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tfbatch import run_transform
from tfbatch.handlers.service import InferenceService, InvocationRequest
from tfbatch.testing.models import make_keras_image_model


def _photos() -> dict[str, bytes]:
    from sklearn.datasets import load_sample_images

    out = {}
    for n, photo in enumerate(load_sample_images().images):
        for k, (top, left) in enumerate(((0, 0), (100, 200), (180, 300))):
            buf = io.BytesIO()
            crop = photo[top:top + 240, left:left + 320]
            if k == 2:
                Image.fromarray(crop).save(buf, format="PNG")
                out[f"p{n}{k}.png"] = buf.getvalue()
            else:
                Image.fromarray(crop).save(buf, format="JPEG", quality=90)
                out[f"p{n}{k}.jpg"] = buf.getvalue()
    return out


def _pil_input(body: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(body)) as img:
        return np.asarray(img.convert("RGB").resize((64, 64), Image.BILINEAR)).astype(np.float32) / 255.0


@pytest.fixture(scope="module")
def keras_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("keras")
    make_keras_image_model(root / "1")
    return root


@pytest.fixture(scope="module")
def server(keras_dir):
    from tfbatch.runtime import ModelServer

    server = ModelServer({"model": {1: keras_dir / "1"}})
    yield server
    server.close()


@pytest.fixture(scope="module")
def photos():
    return _photos()


@pytest.fixture(scope="module")
def expected(server, photos) -> dict[str, np.ndarray]:
    servable = server.resolve()
    batch = np.stack([_pil_input(body) for body in photos.values()])
    (out,) = servable.run("serving_default", {"inputs": batch}).values()
    return dict(zip(photos, out))


def test_endpoint_answers_what_the_model_gives_on_a_pil_decode(server, photos, expected):
    sig = server.resolve().signatures["serving_default"]
    assert sig.inputs["inputs"].dtype == "float32" and sig.inputs["inputs"].shape == (None, 64, 64, 3)
    service = InferenceService(server)
    for name, body in photos.items():
        resp = service.invoke(InvocationRequest(body=body, content_type="application/x-image"))
        assert resp.status == 200, resp.body
        (row,) = json.loads(resp.body)["predictions"]
        np.testing.assert_allclose(row, expected[name], atol=2e-3, err_msg=name)


def test_endpoint_refuses_a_gif_and_a_cut_jpeg_by_name(server, photos):
    service = InferenceService(server)
    buf = io.BytesIO()
    Image.new("RGB", (64, 64)).save(buf, format="GIF")
    resp = service.invoke(InvocationRequest(body=buf.getvalue(), content_type="image/gif"))
    assert resp.status == 400 and b"GIF images are not accepted; expected JPEG or PNG" in resp.body
    cut = photos["p00.jpg"][:3000]
    resp = service.invoke(InvocationRequest(body=cut, content_type="image/jpeg"))
    assert resp.status == 400 and b"JPEG data could not be decoded past its header" in resp.body


def test_batch_job_writes_each_image_and_one_error_line_per_bad_one(tmp_path, keras_dir, photos, expected):
    folder = tmp_path / "in"
    folder.mkdir()
    for name, body in photos.items():
        (folder / name).write_bytes(body)
    buf = io.BytesIO()
    Image.new("RGB", (64, 64)).save(buf, format="GIF")
    (folder / "anim.gif").write_bytes(buf.getvalue())
    (folder / "cut.jpg").write_bytes(photos["p01.jpg"][:2500])
    out = tmp_path / "out"
    report = run_transform(model=str(keras_dir), input=str(folder), output=str(out),
                           content_type="application/x-image", max_batch_size=4)
    assert report.succeeded == len(photos) and report.failed == 2
    for name in photos:
        (row,) = json.loads((out / f"{name}.out").read_bytes())["predictions"]
        np.testing.assert_allclose(row, expected[name], atol=2e-3, err_msg=name)
    errors = {e["object"]: e for e in map(json.loads, (out / "_tfbatch" / "errors.jsonl").read_text().splitlines())}
    assert sorted(errors) == ["anim.gif", "cut.jpg"]
    assert errors["anim.gif"]["status"] == errors["cut.jpg"]["status"] == 400
    assert "GIF images are not accepted; expected JPEG or PNG" in errors["anim.gif"]["error"]
    assert "JPEG data could not be decoded past its header" in errors["cut.jpg"]["error"]
