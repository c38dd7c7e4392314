"""CRC-32C (Castagnoli) and the TFRecord "masked" variant.

google_crc32c's C extension does the work when it is importable; the pure-Python
table below is only a fallback so a broken wheel degrades speed, not correctness.
"""

from __future__ import annotations

from typing import Callable

_MASK_DELTA = 0xA282EAD8
_POLY_REFLECTED = 0x82F63B78


def _make_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ _POLY_REFLECTED if crc & 1 else crc >> 1
        table.append(crc)
    return table


_TABLE: list[int] | None = None


def crc32c_python(data: bytes) -> int:
    """Table-driven CRC-32C; slow (per byte) but dependency free."""
    global _TABLE
    if _TABLE is None:
        _TABLE = _make_table()
    table = _TABLE
    crc = 0xFFFFFFFF
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _load() -> tuple[Callable[[bytes], int], str]:
    try:
        import google_crc32c
    except ImportError:
        return crc32c_python, "python"
    return google_crc32c.value, f"google_crc32c ({google_crc32c.implementation})"


crc32c, IMPLEMENTATION = _load()


def masked_crc32c(data: bytes) -> int:
    """TFRecord's masked CRC: rotate right by 15 bits and add a constant, mod 2**32."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF
