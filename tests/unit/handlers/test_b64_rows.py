"""The handler worker's fast decode of ``{"instances": [{"b64": ...}]}`` bodies gives exactly
what the general path gives (header check, then the codec): the same tensors, the same error
for an image over the pixel budget, and None (the general path decides) for anything else."""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest
from PIL import Image

from tfbatch.errors import InvalidInput
from tfbatch.handlers import pool_worker
from tfbatch.handlers.pool_worker import b64_request
from tfbatch.records.images import check_encoded_images
from tfbatch.runtime.signature import SignatureInfo, TensorInfo
from tfbatch.testing.hostile import png_bomb
from tfbatch.tfs.codec import decode_predict

MAX_PIXELS = 50_000_000


def b64_rows(body, sig, max_pixels):
    """One body through the fast path (``b64_request``: the texts, their decode, then the
    tensors, as ``Worker.run`` and ``Worker._finish`` take a hop's); None where the general
    path decides."""
    found = b64_request(body, sig, max_pixels)
    return None if found is None else found[1]


@pytest.fixture(autouse=True, params=["installed", "binascii"])
def decoder(request, monkeypatch):
    """Every test with the decoder installed here (pybase64 when present) and with binascii's."""
    if request.param == "binascii":
        monkeypatch.setattr(pool_worker, "_b64decode", pool_worker._strict_b64decode)
    return request.param


def _sig(dtype: str = "string", shape=(None,), inputs: int = 1) -> SignatureInfo:
    names = ["image_bytes", "other"][:inputs]
    return SignatureInfo("serving_default", "tensorflow/serving/predict",
                         {k: TensorInfo(k, f"{k}:0", dtype, shape) for k in names}, {})


def _jpeg(value: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.full((12, 9, 3), value, np.uint8)).save(buf, format="JPEG")
    return buf.getvalue()


def _general(body, sig):
    check_encoded_images(body, MAX_PIXELS)
    return decode_predict(body, sig)[0]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.mark.parametrize("values", [
    [_jpeg(10)],
    [_jpeg(n * 40) for n in range(5)],
    [b"\x0a\x05not an image, a serialized proto", b"", b"x", b"xy", _jpeg(3)],
])
def test_the_tensors_are_the_codecs(values):
    body = {"instances": [{"b64": _b64(v)} for v in values]}
    for sig in (_sig(), _sig(shape=None)):
        fast = b64_rows(body, sig, MAX_PIXELS)
        assert fast is not None
        expected = _general(body, sig)
        assert fast.keys() == expected.keys()
        for key in fast:
            assert fast[key].dtype == expected[key].dtype and fast[key].shape == expected[key].shape
            assert fast[key].tolist() == expected[key].tolist()


def test_an_image_over_the_pixel_budget_fails_with_the_general_paths_words():
    body = {"instances": [{"b64": _b64(_jpeg(1))}, {"b64": _b64(png_bomb(13000, 13000))}]}
    with pytest.raises(InvalidInput) as general:
        _general(body, _sig())
    with pytest.raises(InvalidInput) as fast:
        b64_rows(body, _sig(), MAX_PIXELS)
    assert str(fast.value) == str(general.value)
    assert "request.instances[1]" in str(fast.value)


@pytest.mark.parametrize("text", ["not base64!", "QUJD=", "QQ===", "QQ=", "QQ", "=QQ=", "QQ==QQ==", "Q Q==", "é", ""])
def test_odd_base64_is_decoded_as_the_general_path_decodes_it_or_left_to_it(text):
    body = {"instances": [{"b64": text}]}
    fast = b64_rows(body, _sig(), MAX_PIXELS)
    try:
        expected = _general(body, _sig())
    except InvalidInput:
        assert fast is None
    else:
        assert fast is None or fast["image_bytes"].tolist() == expected["image_bytes"].tolist()


@pytest.mark.parametrize("body", [
    {"instances": [{"b64": "not base64!"}]},
    {"instances": [{"b64": "é"}]},
    {"instances": [{"b64": 3}]},
    {"instances": [{"b64": _b64(b"ab"), "extra": 1}]},
    {"instances": [{"b64": _b64(b"ab")}, "plain text"]},
    {"instances": []},
    {"instances": {"b64": _b64(b"ab")}},
    {"inputs": [{"b64": _b64(b"ab")}]},
    {"instances": [{"b64": _b64(b"ab")}], "signature_name": "serving_default"},
    [{"b64": _b64(b"ab")}],
])
def test_anything_unusual_goes_the_general_way(body):
    assert b64_rows(body, _sig(), MAX_PIXELS) is None


def test_only_one_string_input_of_rank_one_takes_the_fast_way():
    body = {"instances": [{"b64": _b64(b"ab")}]}
    assert b64_rows(body, _sig(dtype="float"), MAX_PIXELS) is None
    assert b64_rows(body, _sig(inputs=2), MAX_PIXELS) is None
    assert b64_rows(body, _sig(shape=(None, 1)), MAX_PIXELS) is None


@pytest.mark.parametrize("odd", ["not base64!", "QUJD=", "QQ===", "QQ=", "QQ", "=QQ=", "QQ==QQ==", "Q Q==", "é", "",
                                 "QR==", "QUI=", "AAAA===="])
def test_an_odd_value_among_good_ones_is_decided_as_it_is_alone(odd):
    good = [_b64(_jpeg(n * 50)) for n in range(3)]
    for texts in ([odd, *good], [*good, odd], [good[0], odd, good[1]]):
        alone = []
        for text in texts:
            try:
                alone.append(pool_worker._b64decode(text))
            except ValueError:  # binascii.Error is a ValueError
                alone.append(None)
        assert pool_worker.b64decode_all(texts) == alone
        body = {"instances": [{"b64": t} for t in texts]}
        fast = b64_rows(body, _sig(), MAX_PIXELS)
        # A value ending in "===" is left to the general path whatever a decoder says of it.
        assert (fast is None) == (None in alone or odd.endswith("==="))


def test_many_values_decoded_together_are_each_values_bytes():
    rng = np.random.default_rng(7)
    values = [rng.bytes(int(n)) for n in rng.integers(0, 200, size=300)] + [b"", b"a", b"ab", b"abc"]
    texts = [_b64(v) for v in values]
    assert pool_worker.b64decode_all(texts) == values
    assert pool_worker.b64decode_all(texts[:1]) == values[:1]
