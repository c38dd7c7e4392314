"""A large numeric array's JSON text, cut into pieces that can be written independently.

``orjson.dumps(arr)`` of a C-contiguous array is one C loop; the text of a slice of its
leading axes is the text of those rows. So the whole text can be written as the texts of
consecutive slices, with the brackets and commas between them added here. Each piece names
its values by their flat offset, so whoever writes it needs only that run of the flat array
(:mod:`tfbatch.tfs.json_helpers` ships such runs to other processes).

This module imports only NumPy and orjson: the helper processes import it and nothing else
of tfbatch.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from math import prod
from typing import NamedTuple

import numpy as np
import orjson

OPTIONS = orjson.OPT_SERIALIZE_NUMPY


class Piece(NamedTuple):
    """``head``, then the text of ``flat[start:start + size].reshape(shape)`` (without its
    outer brackets when ``inner``), then ``tail``. With ``shape`` None the piece is ``head`` alone."""

    head: bytes
    start: int
    shape: tuple[int, ...] | None
    inner: bool
    tail: bytes

    @property
    def size(self) -> int:
        return 0 if self.shape is None else prod(self.shape)


def _literal(text: bytes) -> Piece:
    return Piece(text, 0, None, False, b"")


def pieces(shape: Sequence[int], chunk_values: int, start: int = 0) -> Iterator[Piece]:
    """The pieces of an array of ``shape``, each of at most about ``chunk_values`` values."""
    shape = tuple(shape)
    size = prod(shape)
    if not shape or size <= chunk_values:
        yield Piece(b"", start, shape, False, b"")
        return
    rows = shape[0]
    per_row = size // rows
    if per_row > chunk_values:  # one row alone is too big: cut inside each row
        yield _literal(b"[")
        for i in range(rows):
            if i:
                yield _literal(b",")
            yield from pieces(shape[1:], chunk_values, start + i * per_row)
        yield _literal(b"]")
        return
    step = chunk_values // per_row
    for first in range(0, rows, step):
        count = min(step, rows - first)
        # dumps of rows [first, first + count) is "[r,r,...]": keep the inside, add this
        # array's own brackets and the comma between slices.
        yield Piece(b"[" if first == 0 else b",", start + first * per_row, (count, *shape[1:]), True,
                    b"]" if first + step >= rows else b"")


# A later slice is written with its preceding row when that row adds at most 1/16 to the work.
_EXTEND_RATIO = 16


def encode(flat: np.ndarray, piece: Piece, offset: int = 0) -> bytes | memoryview:
    """The bytes of ``piece``, its values read from ``flat`` (whose element 0 is flat offset
    ``offset``): a view into orjson's own output where the piece's brackets and comma can come
    from it, so that the text is not copied once more to add them."""
    if piece.shape is None:
        return piece.head
    begin = piece.start - offset
    size = piece.size
    if piece.inner:
        row_size = size // piece.shape[0]
        if piece.head == b"[" and not piece.tail:
            # The first slice: orjson's "[" is the array's own; drop its closing bracket.
            return memoryview(orjson.dumps(flat[begin:begin + size].reshape(piece.shape), option=OPTIONS))[:-1]
        if piece.head == b"," and begin >= row_size and row_size * _EXTEND_RATIO <= size:
            # A later slice: write it with the row before it, "[r0,r1,...,rn]", and keep
            # ",r1,...,rn" (and the closing bracket when this slice ends the array). Inside a
            # row of depth d no comma follows d closing brackets, so the first such comma is r0's end.
            shape = (piece.shape[0] + 1, *piece.shape[1:])
            text = orjson.dumps(flat[begin - row_size:begin + size].reshape(shape), option=OPTIONS)
            depth = len(shape) - 1
            cut = text.index(b"]" * depth + b",") + depth
            view = memoryview(text)[cut:]
            return view if piece.tail == b"]" else view[:-1]
    text = orjson.dumps(flat[begin:begin + size].reshape(piece.shape), option=OPTIONS)
    if not piece.inner:
        return piece.head + text + piece.tail if piece.head or piece.tail else text
    return b"".join((piece.head, memoryview(text)[1:-1], piece.tail))
