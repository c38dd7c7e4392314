"""A TF Serving JSON response as a sequence of byte chunks, so encoding can overlap sending.

On a 10 MB float output the server's one ``orjson.dumps`` (about 85 ms for 27 MB of text)
used to finish before the first byte left, and the client's read (40-80 ms) only started
after it. :func:`plan` cuts the same text into chunks: every large numpy array is written
as ``orjson.dumps`` over contiguous slices of its leading axes (each slice in C, no Python
per element), with the brackets and commas between slices written here. Everything else
(keys, small arrays, scalars, the non-finite fragments of :func:`jsonenc.native_array`)
is encoded when the plan is made, so any error surfaces before a status line is sent.

The concatenation of the chunks is byte for byte what :func:`jsonenc.dumps` writes for
the same value; tests/unit/tfs/test_jsonstream.py holds it to that.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import orjson

from tfbatch.runtime import jsonenc
from tfbatch.tfs import jsonpieces

# About 0.6 MB of float32 text and a few ms of orjson per chunk: small enough that the event
# loop gets the GIL back often to feed the socket, large enough that per-chunk Python is noise.
CHUNK_VALUES = 1 << 16

_OPTIONS = jsonpieces.OPTIONS
_NATIVE = frozenset("biuf")


class Plan:
    """Pre-encoded bytes and large arrays, in response order; iterate it for the chunks."""

    def __init__(self, chunk_values: int, helpers: Any = None):
        self.chunk_values = chunk_values
        # A tfbatch.tfs.json_helpers.JsonHelpers: other processes write parts of each large array.
        self.helpers = helpers
        self.parts: list[bytes | np.ndarray] = []
        self._pending: list[bytes] = []

    def text(self, piece: bytes) -> None:
        self._pending.append(piece)

    def array(self, arr: np.ndarray) -> None:
        self._flush()
        self.parts.append(arr)

    def _flush(self) -> None:
        if self._pending:
            self.parts.append(b"".join(self._pending))
            self._pending = []

    def __iter__(self) -> Iterator[bytes]:
        self._flush()
        if self.helpers is not None:
            yield from self.helpers.encode(self._items())
            return
        for part in self.parts:
            if isinstance(part, bytes):
                yield part
            else:
                yield from array_chunks(part, self.chunk_values)

    def _items(self) -> list[bytes | tuple[np.ndarray, jsonpieces.Piece]]:
        # The whole answer as text and (values, piece) pairs: the helpers share the pieces of
        # every large array in it (a row-format answer has one array per row and output).
        items: list = []
        for part in self.parts:
            if isinstance(part, bytes):
                items.append(part)
                continue
            flat = part.reshape(-1)
            for piece in jsonpieces.pieces(part.shape, self.chunk_values):
                items.append(piece.head if piece.shape is None else (flat, piece))
        return items


def plan(value: Any, chunk_values: int = CHUNK_VALUES, helpers: Any = None) -> Plan | None:
    """The chunks of ``jsonenc.dumps(value)``, or None when nothing in it is worth streaming
    (no array above ``chunk_values`` values) or orjson cannot write it (then ``dumps`` falls
    back to the standard library, whose output only ``dumps`` itself reproduces)."""
    if not _has_large_array(value, chunk_values):
        return None
    out = Plan(chunk_values, helpers)
    try:
        _walk(value, out)
    except (TypeError, orjson.JSONEncodeError):
        return None
    return out


def encode(value: Any) -> bytes | Plan:
    """``jsonenc.dumps(value)``, or the plan of its chunks when it holds an array worth streaming
    (``tfs.streaming.streamed`` gives a plan the endpoint's JSON helpers when it sends it)."""
    chunks = plan(value)
    return jsonenc.dumps(value) if chunks is None else chunks


def _is_large(value: Any, chunk_values: int) -> bool:
    # Exactly the arrays orjson writes natively (native_array has already widened float16).
    return (isinstance(value, np.ndarray) and value.ndim > 0 and value.size > chunk_values
            and value.dtype.kind in _NATIVE and value.dtype != np.float16 and value.flags.c_contiguous)


def _has_large_array(value: Any, chunk_values: int) -> bool:
    if isinstance(value, dict):
        return any(_has_large_array(v, chunk_values) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_has_large_array(v, chunk_values) for v in value)
    return _is_large(value, chunk_values)


def _walk(value: Any, out: Plan) -> None:
    if _is_large(value, out.chunk_values):
        out.array(value)
    elif isinstance(value, dict) and _has_large_array(value, out.chunk_values):
        out.text(b"{")
        for n, (key, item) in enumerate(value.items()):
            if not isinstance(key, str):
                raise TypeError("orjson writes only str keys")
            out.text((b"," if n else b"") + orjson.dumps(key) + b":")
            _walk(item, out)
        out.text(b"}")
    elif isinstance(value, (list, tuple)) and _has_large_array(value, out.chunk_values):
        out.text(b"[")
        for n, item in enumerate(value):
            if n:
                out.text(b",")
            _walk(item, out)
        out.text(b"]")
    else:
        out.text(orjson.dumps(value, default=jsonenc._default, option=_OPTIONS))


def array_chunks(arr: np.ndarray, chunk_values: int) -> Iterator[bytes]:
    """``orjson.dumps(arr)`` in pieces of at most about ``chunk_values`` values each."""
    flat = arr.reshape(-1)
    for piece in jsonpieces.pieces(arr.shape, chunk_values):
        yield jsonpieces.encode(flat, piece)
