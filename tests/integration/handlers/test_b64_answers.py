"""A script's in-process call with base64 images (``{"instances": [{"b64": ...}]}``, what a single
``handler`` POSTs to ``context.rest_uri``) is answered through the fast decode: each image
decoded once, its header checked on the decoded bytes. Every answer and every error must be the
bytes the general path (``_call_model``: header check, codec, encode) gives."""

from __future__ import annotations

import base64
import io
import json

import numpy as np
import pytest
from PIL import Image

from tfbatch.errors import TfbatchError
from tfbatch.handlers.service import InferenceService
from tfbatch.runtime import jsonenc
from tfbatch.testing.hostile import png_bomb


def _image(value: int, fmt: str) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.full((8, 8), value, np.uint8)).save(buf, format=fmt)
    return buf.getvalue()


def _b64(data: bytes) -> dict:
    return {"b64": base64.b64encode(data).decode()}


def _both(service: InferenceService, body: dict) -> tuple:
    """(fast answer or error, general answer or error) for ``body``."""
    out = []
    for call in (lambda: service.model_answer(body, "model", None, "predict"),
                 lambda: jsonenc.dumps(service._call_model(body, "model", None, "predict"))):
        try:
            out.append(("answer", call()))
        except TfbatchError as err:
            out.append(("error", err.status, str(err)))
    return tuple(out)


BODIES = {
    "one JPEG": {"instances": [_b64(_image(10, "JPEG"))]},
    "a PNG and two JPEGs": {"instances": [_b64(_image(200, "PNG")), _b64(_image(0, "JPEG")),
                                          _b64(_image(99, "JPEG"))]},
    "over the pixel budget": {"instances": [_b64(_image(1, "PNG")), _b64(png_bomb(6000, 6000))]},
    "not base64": {"instances": [{"b64": "not base64!"}]},
    "bytes that are no image": {"instances": [_b64(b"just some text")]},
    "a key besides instances": {"instances": [_b64(_image(5, "PNG"))], "signature_name": "serving_default"},
    "a value that is not b64": {"instances": ["plain"]},
}


@pytest.mark.parametrize("name", BODIES)
def test_the_fast_answer_is_the_general_paths(image_server, name):
    service = InferenceService(image_server, max_image_pixels=1_000_000)
    fast, general = _both(service, BODIES[name])
    assert fast == general


def test_image_bodies_take_the_fast_decode(image_server):
    service = InferenceService(image_server)
    answer = service._b64_answer(BODIES["a PNG and two JPEGs"], "model", None)
    assert answer is not None and len(json.loads(answer)["predictions"]) == 3
    for name in ("not base64", "a key besides instances", "a value that is not b64"):
        assert service._b64_answer(BODIES[name], "model", None) is None, name
