"""The script base64 look-alikes: the standard library's bytes, and its errors, for any input."""

from __future__ import annotations

import array
import base64

from hypothesis import given, settings
from hypothesis import strategies as st

from tfbatch.runtime import base64like

_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def _outcome(call):
    """What a call gives: ("ok", bytes) or ("error", its type and message)."""
    try:
        return "ok", call()
    except Exception as exc:  # noqa: BLE001 - the error is the outcome compared
        return "error", type(exc), str(exc)


def _buffers():
    raw = st.binary(max_size=300)
    return st.one_of(raw, raw.map(bytearray), raw.map(memoryview),
                     st.lists(st.integers(-2**31, 2**31 - 1), max_size=20).map(lambda v: array.array("i", v)),
                     raw.map(lambda b: memoryview(b)[::2]),  # not contiguous
                     st.text(max_size=20))  # not bytes at all


@settings(max_examples=400, deadline=None)
@given(_buffers(), st.sampled_from([None, b"-_", b"-_x", "-_"]))
def test_encoding_gives_the_standard_librarys_answer(data, altchars):
    assert _outcome(lambda: base64like.b64encode(data, altchars)) == _outcome(lambda: base64.b64encode(data, altchars))
    if altchars is None:
        assert _outcome(lambda: base64like.standard_b64encode(data)) == _outcome(
            lambda: base64.standard_b64encode(data))


def _texts():
    """Base64 text, canonical or not: the alphabet, padding anywhere, characters the lenient
    decoding discards, newlines, non-ASCII, as str or bytes."""
    canonical = st.binary(max_size=200).map(lambda b: base64.b64encode(b).decode())
    noisy = st.text(alphabet=_ALPHABET + "=\n -_.é", max_size=40)
    joined = st.lists(st.one_of(canonical, noisy), min_size=1, max_size=3).map("".join)
    return st.one_of(canonical, noisy, joined).flatmap(
        lambda t: st.sampled_from([t, t.encode("utf-8"), bytearray(t.encode("utf-8"))]))


@settings(max_examples=600, deadline=None)
@given(_texts(), st.sampled_from([None, b"-_"]), st.booleans())
def test_decoding_gives_the_standard_librarys_answer(text, altchars, validate):
    assert _outcome(lambda: base64like.b64decode(text, altchars, validate)) == _outcome(
        lambda: base64.b64decode(text, altchars, validate))
    assert _outcome(lambda: base64like.standard_b64decode(text)) == _outcome(lambda: base64.standard_b64decode(text))


def test_text_after_the_padding_decodes_as_the_standard_library_decodes_it():
    # pybase64's lenient decoding reads on past the padding (b"a\x06\x10"); the standard
    # library stops there, and so do the look-alikes
    assert base64like.b64decode(b"YQ==YQ==") == base64.b64decode(b"YQ==YQ==") == b"a"
