"""A compact set of object keys: 16 bytes per key, not a Python string per key.

A resumed 10M-object job must know which keys are done without holding 10M ``str``
objects in a ``set`` (about 100 bytes each, over a gigabyte). Keys are hashed to 128 bits
(BLAKE2b) and kept as two sorted ``uint64`` columns; a lookup is a binary search, and a
page of keys is looked up in one vectorised call. With 128-bit hashes the chance that any
two of 10^7 keys collide is about 10^-25, so a hit is treated as the key itself.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import numpy as np


def key_hash(key: str) -> tuple[int, int]:
    digest = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=16).digest()
    return int.from_bytes(digest[:8], "little"), int.from_bytes(digest[8:], "little")


def hash_keys(keys: Iterable[str]) -> tuple[np.ndarray, np.ndarray]:
    raw = b"".join(hashlib.blake2b(k.encode("utf-8", "surrogatepass"), digest_size=16).digest() for k in keys)
    pairs = np.frombuffer(raw, dtype="<u8").reshape(-1, 2)
    return pairs[:, 0].copy(), pairs[:, 1].copy()


class KeyIndex:
    """Add keys (buffered), then query with ``in`` or ``contains_many``; adding after a query is fine."""

    _FLUSH = 65536

    def __init__(self, keys: Iterable[str] = ()):
        self._hi = np.empty(0, dtype=np.uint64)
        self._lo = np.empty(0, dtype=np.uint64)
        self._pending: list[str] = []
        self._chunks: list[tuple[np.ndarray, np.ndarray]] = []
        for key in keys:
            self.add(key)

    def add(self, key: str) -> None:
        self._pending.append(key)
        if len(self._pending) >= self._FLUSH:
            self._chunks.append(hash_keys(self._pending))
            self._pending = []

    def update(self, keys: Iterable[str]) -> None:
        self._pending.extend(keys)
        if len(self._pending) >= self._FLUSH:
            self._chunks.append(hash_keys(self._pending))
            self._pending = []

    def _settle(self) -> None:
        if self._pending:
            self._chunks.append(hash_keys(self._pending))
            self._pending = []
        if not self._chunks:
            return
        his = [self._hi, *(c[0] for c in self._chunks)]
        los = [self._lo, *(c[1] for c in self._chunks)]
        self._chunks = []
        hi, lo = np.concatenate(his), np.concatenate(los)
        order = np.lexsort((lo, hi))
        hi, lo = hi[order], lo[order]
        if len(hi) > 1:
            keep = np.ones(len(hi), dtype=bool)
            keep[1:] = (hi[1:] != hi[:-1]) | (lo[1:] != lo[:-1])
            hi, lo = hi[keep], lo[keep]
        self._hi, self._lo = hi, lo

    def __len__(self) -> int:
        self._settle()
        return len(self._hi)

    def __bool__(self) -> bool:
        return len(self) > 0

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, str):
            return False
        return bool(self.contains_many([key])[0])

    def contains_many(self, keys: list[str]) -> np.ndarray:
        """A bool per key, in one pass over a page of keys."""
        return self.contains_hashes(*hash_keys(keys))

    def contains_hashes(self, hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
        """``contains_many`` for keys already hashed with ``hash_keys``."""
        self._settle()
        if not len(hi) or not len(self._hi):
            return np.zeros(len(hi), dtype=bool)
        left = np.searchsorted(self._hi, hi, side="left")
        right = np.searchsorted(self._hi, hi, side="right")
        span = right - left
        found = np.zeros(len(hi), dtype=bool)
        single = span == 1
        found[single] = self._lo[left[single]] == lo[single]
        for i in np.nonzero(span > 1)[0]:
            # Equal high halves are adjacent and sorted by the low half.
            j = left[i] + np.searchsorted(self._lo[left[i]:right[i]], lo[i])
            found[i] = j < right[i] and self._lo[j] == lo[i]
        return found

    def nbytes(self) -> int:
        return int(self._hi.nbytes + self._lo.nbytes)
