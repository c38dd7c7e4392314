"""Helpers shared by the records tests."""

from __future__ import annotations

import io

import pytest


class Trickle(io.RawIOBase):
    """A stream that hands out at most ``step`` bytes per read and counts what it gave."""

    def __init__(self, data: bytes, step: int = 3):
        self._data = data
        self._pos = 0
        self._step = step
        self.given = 0

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0:
            n = len(self._data)
        out = self._data[self._pos : self._pos + min(n, self._step)]
        self._pos += len(out)
        self.given += len(out)
        return out


@pytest.fixture(scope="session")
def trickle():
    return Trickle
