"""A compact set of object keys: 16 bytes per key, not a Python string per key.

A resumed 10M-object job must know which keys are done without holding 10M ``str``
objects in a ``set`` (about 100 bytes each, over a gigabyte). Each key becomes two 64-bit
halves kept as two ``uint64`` columns sorted together; a page of keys is looked up in one
vectorised binary search.

The high half is the key's partition hash (``partition_hashes``: 64-bit BLAKE2b, the one
``plan.instance_of`` takes modulo the instance count), so the planner hashes each listed
key once for both jobs. The low half is Python's own string hash (SipHash with a per-process
random key, cached on the string): cheap, independent of BLAKE2b, and fine here because an
index lives in one process and is never written out. Two independent 64-bit hashes make
the chance that any two of 10^7 keys collide about 10^-25, so a hit is treated as the key.

Lookups do not binary-search the whole column (at 5M keys that is ~23 dependent cache misses
per key, the planner's largest cost): a directory of bucket starts, indexed by the top bits
of the high half, holds about one key per bucket because the hashes are uniform, so a
page of keys finds its positions in a couple of vectorised steps (4 bytes per bucket).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

import numpy as np

_blake2b = hashlib.blake2b


def _encoded(key: str) -> bytes:
    # surrogatepass: local file names that are not valid UTF-8 still hash (and differ).
    return key.encode("utf-8", "surrogatepass")


def partition_hash(key: str) -> int:
    return int.from_bytes(_blake2b(_encoded(key), digest_size=8).digest(), "big")


def partition_hashes(keys: Sequence[str]) -> np.ndarray:
    """``partition_hash`` of every key, as one ``uint64`` array (one BLAKE2b call per key)."""
    raw = b"".join([_blake2b(k.encode("utf-8", "surrogatepass"), digest_size=8).digest() for k in keys])
    return np.frombuffer(raw, dtype=">u8").astype(np.uint64)


def local_hashes(keys: Sequence[str]) -> np.ndarray:
    """The low half: Python's string hash, as ``uint64``."""
    return np.fromiter(map(hash, keys), dtype=np.int64, count=len(keys)).view(np.uint64)


def key_hash(key: str) -> tuple[int, int]:
    return partition_hash(key), hash(key) & 0xFFFFFFFFFFFFFFFF


def hash_keys(keys: Iterable[str]) -> tuple[np.ndarray, np.ndarray]:
    keys = keys if isinstance(keys, (list, tuple)) else list(keys)
    return partition_hashes(keys), local_hashes(keys)


class KeyIndex:
    """Add keys (buffered), then query with ``in`` or ``contains_many``; adding after a query is fine."""

    _FLUSH = 65536

    def __init__(self, keys: Iterable[str] = ()):
        self._hi = np.empty(0, dtype=np.uint64)
        self._lo = np.empty(0, dtype=np.uint64)
        self._pending: list[str] = []
        self._chunks: list[tuple[np.ndarray, np.ndarray]] = []
        self._starts = np.zeros(2, dtype=np.int64)  # bucket b's keys are [_starts[b], _starts[b + 1])
        self._shift = np.uint64(63)
        for key in keys:
            self.add(key)

    @classmethod
    def from_hashes(cls, hi: np.ndarray, lo: np.ndarray) -> "KeyIndex":
        """An index of keys given by their two halves (as ``hash_keys`` makes them)."""
        index = cls()
        index._chunks.append((np.asarray(hi, dtype=np.uint64), np.asarray(lo, dtype=np.uint64)))
        return index

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
        # By the high half first (a plain argsort is ~4x faster than lexsort on both), then by the
        # low half only within runs of equal high halves: the same key added twice, or a collision.
        order = np.argsort(hi)
        hi, lo = hi[order], lo[order]
        if len(hi) > 1:
            same = hi[1:] == hi[:-1]
            if same.any():
                runs = np.zeros(len(hi), dtype=bool)
                runs[1:] |= same
                runs[:-1] |= same
                at = np.flatnonzero(runs)
                lo[at] = lo[at][np.lexsort((lo[at], hi[at]))]
                keep = np.ones(len(hi), dtype=bool)
                keep[1:] = ~same | (lo[1:] != lo[:-1])
                hi, lo = hi[keep], lo[keep]
        self._hi, self._lo = hi, lo
        self._index_buckets()

    def _index_buckets(self) -> None:
        bits = max(1, min(24, len(self._hi).bit_length() - 1))  # about one key per bucket, 64 MiB at most
        self._shift = np.uint64(64 - bits)
        counts = np.bincount((self._hi >> self._shift).astype(np.intp), minlength=1 << bits)
        starts = np.zeros(len(counts) + 1, dtype=np.int32 if len(self._hi) < 2**31 else np.int64)
        np.cumsum(counts, out=starts[1:])
        self._starts = starts

    def _left(self, hi: np.ndarray) -> np.ndarray:
        """``np.searchsorted(self._hi, hi, side="left")``, through the bucket directory."""
        bucket = (hi >> self._shift).astype(np.intp)
        pos = self._starts[bucket].astype(np.intp)
        end = self._starts[bucket + 1].astype(np.intp)
        last = len(self._hi) - 1
        active = pos < end
        while active.any():  # a step per key in the fullest bucket hit: a handful at most
            step = active & (self._hi[np.minimum(pos, last)] < hi)
            pos += step
            active = step & (pos < end)
        return pos

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
        # The first entry with that high half (if any) usually is the key.
        left = self._left(hi)
        at = np.minimum(left, len(self._hi) - 1)
        same_hi = self._hi[at] == hi
        found = same_hi & (self._lo[at] == lo)
        for i in np.nonzero(same_hi & ~found)[0]:
            # Rare: several keys share the high half; they are adjacent and sorted by the low half.
            right = np.searchsorted(self._hi, hi[i], side="right")
            j = left[i] + np.searchsorted(self._lo[left[i]:right], lo[i])
            found[i] = j < right and self._lo[j] == lo[i]
        return found

    def nbytes(self) -> int:
        return int(self._hi.nbytes + self._lo.nbytes + self._starts.nbytes)
