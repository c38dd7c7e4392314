"""The pixel budget before any decode: image bodies and b64 images meet it as 400s, named."""

from __future__ import annotations

import base64
import io
import json

import numpy as np
from PIL import Image

from tfbatch.handlers.service import InferenceService, InvocationRequest
from tfbatch.testing.hostile import png_bomb


def _png(size: int = 8) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.full((size, size), 200, np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


def _error(resp) -> str:
    return json.loads(resp.body)["error"]


def test_png_bomb_body_to_a_model_that_decodes_in_its_graph_is_400(image_server):
    # serving_default takes image_bytes (string) and runs tf.io.decode_image itself.
    resp = InferenceService(image_server).invoke(InvocationRequest(body=png_bomb(), content_type="image/png"))
    assert resp.status == 400
    assert "PNG image of 13000 x 13000 = 169000000 pixels exceeds the pixel budget of 50000000" in _error(resp)


def test_png_bomb_as_b64_json_is_400_naming_where_it_was(image_server):
    body = json.dumps({"instances": [{"b64": base64.b64encode(_png()).decode()},
                                     {"b64": base64.b64encode(png_bomb(8000, 8000)).decode()}]})
    resp = InferenceService(image_server).invoke(InvocationRequest(body=body.encode()))
    assert resp.status == 400
    assert _error(resp).startswith("request.instances[1]: PNG image of 8000 x 8000")


def test_budget_is_a_setting_and_an_image_at_it_passes(image_server):
    tight = InferenceService(image_server, max_image_pixels=63)
    assert tight.invoke(InvocationRequest(body=_png(8), content_type="image/png")).status == 400
    exact = InferenceService(image_server, max_image_pixels=64)
    assert exact.invoke(InvocationRequest(body=_png(8), content_type="image/png")).status == 200


def test_bomb_to_a_tensor_input_is_refused_before_pil(image_server):
    from tfbatch.handlers.defaults import image_inputs

    sig = image_server.resolve().signatures["serving_tensor"]
    import pytest

    from tfbatch.errors import InvalidInput

    with pytest.raises(InvalidInput, match="13000 x 13000"):
        image_inputs(png_bomb(), sig)


def test_gif_and_empty_bodies_are_400_saying_what_is_accepted(image_server):
    buf = io.BytesIO()
    Image.new("L", (8, 8)).save(buf, format="GIF")
    service = InferenceService(image_server)
    resp = service.invoke(InvocationRequest(body=buf.getvalue(), content_type="image/gif"))
    assert resp.status == 400 and "GIF images are not accepted; expected JPEG or PNG" in _error(resp)
    resp = service.invoke(InvocationRequest(body=b"", content_type="image/png"))
    assert resp.status == 400 and "empty object (0 bytes)" in _error(resp)


PIL_SCRIPT = """
    import io
    from PIL import Image

    def handler(data, context):
        with Image.open(io.BytesIO(data.read())) as img:
            img.load()
            return str(img.size), "text/plain"
"""


def test_script_decoding_a_bomb_with_pil_gets_a_400(write_script, tmp_path, image_server, monkeypatch):
    from tfbatch.handlers.user_code import load_handlers

    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", Image.MAX_IMAGE_PIXELS)  # restored afterwards

    handlers = load_handlers(write_script(tmp_path / "code", PIL_SCRIPT))
    service = InferenceService(image_server, handlers, max_image_pixels=1_000_000)
    assert Image.MAX_IMAGE_PIXELS == 1_000_000
    resp = service.invoke(InvocationRequest(body=png_bomb(3000, 3000), content_type="image/png"))
    assert resp.status == 400
    assert _error(resp).startswith("handler: image over the pixel budget")
    ok = service.invoke(InvocationRequest(body=_png(8), content_type="image/png"))
    assert ok.status == 200 and ok.body == b"(8, 8)"
