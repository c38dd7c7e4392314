"""A ``{"b64": ...}`` value in a TF Serving JSON body is decoded by pybase64 where installed and
decided by the standard library where pybase64 refuses it: the same bytes, or the same refusal,
as ``base64.b64decode(validate=True)`` gives, whichever decoder is installed."""

from __future__ import annotations

import base64
import binascii

import pytest

from tfbatch import errors
from tfbatch.tfs import codec

ODD = ["", "QQ==", "QQ=", "QQ", "QR==", "QUI=", "QUJD", "QUJD=", "QQ===", "=QQ=", "QQ==QQ==", "AAAA====",
       "Q Q==", "QQ==\n", "not base64!", "é", "QUJD\x00", "////", "-_-_"]


@pytest.fixture(params=["installed", "binascii"])
def decoder(request, monkeypatch):
    if request.param == "binascii":
        monkeypatch.setattr(codec, "fast_b64decode", codec.strict_b64decode)
    return request.param


def _stdlib(text: str):
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None


@pytest.mark.parametrize("text", ODD + [base64.b64encode(bytes(range(256)) * 90).decode()])
def test_every_value_is_decided_as_the_standard_library_decides_it(decoder, text):
    expected = _stdlib(text)
    if expected is None:
        with pytest.raises(errors.InvalidInput, match="'image_bytes': value of 'b64' is not valid base64"):
            codec._b64decode(text, "image_bytes")
    else:
        assert codec._b64decode(text, "image_bytes") == expected


def test_pybase64_is_the_fast_decoder_where_installed():
    pytest.importorskip("pybase64")
    assert codec.fast_b64decode is not codec.strict_b64decode
    assert codec.fast_b64decode("QUJD") == b"ABC"
