"""CRC-32C (Castagnoli) and the TFRecord "masked" variant, on google-crc32c's C extension."""

from __future__ import annotations

import google_crc32c

_MASK_DELTA = 0xA282EAD8

crc32c = google_crc32c.value


def masked_crc32c(data: bytes) -> int:
    """TFRecord's masked CRC: rotate right by 15 bits and add a constant, mod 2**32."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF
