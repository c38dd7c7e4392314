"""Hostile inputs for tests, built in memory and small on disk.

Each one is a real, well-formed file that a decoder would accept and then pay dearly
for; none needs a large buffer to build.
"""

from __future__ import annotations

import struct
import zlib


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_bomb(width: int = 13000, height: int = 13000) -> bytes:
    """A valid 1-bit greyscale PNG of ``width`` x ``height`` black pixels, a few hundred KB at most.

    Decoders expand it to 8 bits or more per pixel: 13000 x 13000 is 169 MP, which PIL
    converted to RGB holds as ~500 MB and TensorFlow's decode_image as 169 MB per channel.
    """
    header = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    row = b"\0" * (1 + (width + 7) // 8)  # filter byte "None" + packed bits
    compressor = zlib.compressobj(9)
    parts = [compressor.compress(row) for _ in range(height)]
    parts.append(compressor.flush())
    return b"".join(
        (b"\x89PNG\r\n\x1a\n", _png_chunk(b"IHDR", header), _png_chunk(b"IDAT", b"".join(parts)), _png_chunk(b"IEND", b""))
    )
