"""Image headers: format and dimensions read from the first bytes, without decoding.

A 481 KB PNG can declare 13000 x 13000 pixels and cost 2.3 GB to decode, and a model
that decodes in its graph would do so without anyone noticing. Every place that hands an
image to a decoder (``imagedecode`` in the no-script path, the model's graph for a string
input) first asks :func:`check_image`, which reads only the header and refuses what is over
the pixel budget.

JPEG and PNG are what the no-script image path accepts: these two are read by both the
host decoder and every TensorFlow version's ``tf.io.decode_image``, so an image works
whichever side decodes it. GIF, BMP and WebP headers are still read so that the budget also
holds for such bytes inside a JSON request to a string input.
"""

from __future__ import annotations

import base64
import binascii
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tfbatch.errors import InvalidInput

DEFAULT_MAX_IMAGE_PIXELS = 50_000_000
ACCEPTED_FORMATS = ("JPEG", "PNG")

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# JPEG start-of-frame markers (baseline, progressive, lossless, arithmetic); C4, C8, CC are not frames.
_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_JPEG_NO_LENGTH = frozenset(range(0xD0, 0xD8)) | {0x01, 0xD8}


@dataclass(frozen=True, slots=True)
class ImageHeader:
    format: str
    width: int
    height: int

    @property
    def pixels(self) -> int:
        return self.width * self.height


def sniff(data: bytes) -> str | None:
    """The image format named by the first bytes, or None when they are not an image we know."""
    if data.startswith(_PNG_SIGNATURE):
        return "PNG"
    if data.startswith(b"\xff\xd8\xff"):
        return "JPEG"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "GIF"
    if data.startswith(b"BM") and len(data) >= 26:
        return "BMP"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "WEBP"
    return None


def read_header(data: bytes, source: str = "body") -> ImageHeader:
    """Format, width and height of an encoded image; InvalidInput when they cannot be read."""
    if not data:
        raise InvalidInput(f"{source}: empty object (0 bytes), expected an encoded image")
    kind = sniff(data)
    if kind is None:
        raise InvalidInput(
            f"{source}: not an image ({len(data)} bytes starting {data[:8]!r}); expected JPEG or PNG"
        )
    try:
        width, height = _READERS[kind](data)
    except (struct.error, IndexError, ValueError) as exc:
        raise InvalidInput(f"{source}: {kind} header is truncated or damaged ({exc})") from None
    if width <= 0 or height <= 0:
        raise InvalidInput(f"{source}: {kind} header declares {width} x {height} pixels")
    return ImageHeader(kind, width, height)


_JPEG_END = b"\xff\xd9"  # the end-of-image marker
_PNG_END = b"IEND\xaeB`\x82"  # the IEND chunk: its type and CRC


def ends_whole(body: bytes, is_png: bool) -> bool:
    """Whether ``body`` ends as a whole file does: a JPEG with its end-of-image marker, a PNG with
    its IEND chunk (up to 4 KB of zero padding after either allowed). A file cut short (an
    interrupted upload or copy: the common damage) does not, and its decode fails, failing every
    image decoded in the same call. Callers use this only to choose where an image goes (alone,
    not in a batch), never whether it is decoded."""
    tail = body[-4096:].rstrip(b"\0")
    return tail.endswith(_PNG_END if is_png else _JPEG_END)


class CutShort:
    """Which images to decode alone because they do not end whole (:func:`ends_whole`).

    An image cut short fails the decode call it is in, and every image in that call with it, so
    it goes alone. Some whole images do not end whole either: a camera's trailer after the JPEG,
    a Motion Photo's video appended to it. Once TRIAL such images have decoded alone and more of
    them decoded than failed, they go with the others again (a damaged one among them is then
    found by its batch's search, as any other damage is). Thread-safe; one per job.
    """

    TRIAL = 16

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.decoded = 0
        self.failed = 0

    def alone(self, body: bytes, is_png: bool) -> bool:
        """Whether ``body`` should be decoded alone, not in a batch."""
        if ends_whole(body, is_png):
            return False
        with self._lock:
            return self.decoded < self.TRIAL or self.failed >= self.decoded

    def outcome(self, decoded: bool) -> None:
        """How an image sent alone by :meth:`alone` fared."""
        with self._lock:
            if decoded:
                self.decoded += 1
            else:
                self.failed += 1


def check_image(
    data: bytes, max_pixels: int, source: str = "body", formats: tuple[str, ...] | None = ACCEPTED_FORMATS
) -> ImageHeader:
    """The header, once it is known to be an accepted format within the pixel budget."""
    return _admit(read_header(data, source), max_pixels, source, formats)


def _admit(header: ImageHeader, max_pixels: int, source: str, formats: tuple[str, ...] | None) -> ImageHeader:
    if formats is not None and header.format not in formats:
        raise InvalidInput(
            f"{source}: {header.format} images are not accepted; expected {' or '.join(formats)}"
        )
    if header.pixels > max_pixels:
        raise InvalidInput(
            f"{source}: {header.format} image of {header.width} x {header.height} = {header.pixels} "
            f"pixels exceeds the pixel budget of {max_pixels} (--max-image-pixels); not decoded"
        )
    return header


def check_encoded_images(body: Any, max_pixels: int) -> None:
    """Check every ``{"b64": ...}`` value of a TFS request body that holds an image.

    Only the first bytes are decoded to recognise an image; bytes that are not one (a
    serialized tf.Example, text) pass, since a string input may carry anything.
    """
    for path, text in _b64_values(body, "request"):
        header = _b64_header(text, path)
        if header is not None:
            _admit(header, max_pixels, path, None)


def _b64_header(text: str, path: str) -> ImageHeader | None:
    """The header of base64 text holding an image, decoding only as much as the header needs.

    PNG, GIF, BMP and WebP headers sit in the first bytes; a JPEG's frame header follows
    its metadata segments, so the decoded prefix grows until the header is complete.
    """
    want = 4096
    while True:
        chars = min(len(text), (want + 2) // 3 * 4)
        try:
            head = base64.b64decode(text[:chars], validate=True)
        except (binascii.Error, ValueError):
            return None  # the codec names invalid base64 with the input it was meant for
        if sniff(head) is None:
            return None
        try:
            return read_header(head, path)
        except InvalidInput:
            if chars >= len(text):
                raise
            want *= 8


def _b64_values(value: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, dict):
        b64 = value.get("b64")
        if len(value) == 1 and isinstance(b64, str):
            yield path, b64
            return
        for key, item in value.items():
            yield from _b64_values(item, f"{path}.{key}")
    elif isinstance(value, list) and not _numeric(value):
        for i, item in enumerate(value):
            yield from _b64_values(item, f"{path}[{i}]")


def _numeric(value: list) -> bool:
    """A list whose first leaf is a number feeds a numeric tensor or is refused by the codec.

    Either way it cannot carry bytes to the model, so a [224][224][3] tensor costs three
    look-ups here instead of a walk over 150,000 numbers.
    """
    while isinstance(value, list) and value:
        value = value[0]
    return isinstance(value, (int, float))


def limit_pil(max_pixels: int) -> None:
    """Make PIL refuse what our own check refuses, for user scripts that decode with it.

    PIL warns above MAX_IMAGE_PIXELS and raises DecompressionBombError above twice that;
    setting it to the budget keeps PIL's hard stop within a factor of two of ours.
    """
    try:
        from PIL import Image
    except ImportError:
        return
    Image.MAX_IMAGE_PIXELS = max_pixels


def _png(data: bytes) -> tuple[int, int]:
    if data[12:16] != b"IHDR":
        raise ValueError("the first chunk is not IHDR")
    return struct.unpack(">II", data[16:24])


def _jpeg(data: bytes) -> tuple[int, int]:
    pos = 2
    while True:
        while data[pos] != 0xFF:  # tolerate garbage between segments, as decoders do
            pos += 1
        while data[pos] == 0xFF:  # fill bytes
            pos += 1
        marker = data[pos]
        pos += 1
        if marker in _JPEG_NO_LENGTH:
            continue
        if marker == 0xDA or marker == 0xD9:
            raise ValueError("no frame header before the image data")
        (length,) = struct.unpack(">H", data[pos : pos + 2])
        if marker in _JPEG_SOF:
            height, width = struct.unpack(">HH", data[pos + 3 : pos + 7])
            return width, height
        if length < 2:
            raise ValueError(f"segment length {length} at byte {pos}")
        pos += length


def _gif(data: bytes) -> tuple[int, int]:
    return struct.unpack("<HH", data[6:10])


def _bmp(data: bytes) -> tuple[int, int]:
    (header_size,) = struct.unpack("<I", data[14:18])
    if header_size == 12:  # OS/2 BITMAPCOREHEADER
        return struct.unpack("<HH", data[18:22])
    width, height = struct.unpack("<ii", data[18:26])
    return width, abs(height)  # negative height: rows stored top-down


def _webp(data: bytes) -> tuple[int, int]:
    chunk = data[12:16]
    if chunk == b"VP8X":
        w = int.from_bytes(data[24:27], "little") + 1
        h = int.from_bytes(data[27:30], "little") + 1
        return w, h
    if chunk == b"VP8L":
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8 ":
        w, h = struct.unpack("<HH", data[26:30])
        return w & 0x3FFF, h & 0x3FFF
    raise ValueError(f"unknown WebP chunk {chunk!r}")


_READERS = {"PNG": _png, "JPEG": _jpeg, "GIF": _gif, "BMP": _bmp, "WEBP": _webp}
