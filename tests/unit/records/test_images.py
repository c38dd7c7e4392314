"""Image headers read without decoding, and the pixel budget built on them."""

from __future__ import annotations

import base64
import io
import struct

import numpy as np
import pytest
from PIL import Image

from tfbatch.errors import InvalidInput
from tfbatch.records.images import CutShort, check_encoded_images, check_image, ends_whole, read_header, sniff
from tfbatch.testing.hostile import png_bomb


def encode(fmt: str, width: int, height: int, **save) -> bytes:
    buf = io.BytesIO()
    mode = "RGB" if fmt in ("JPEG", "WEBP") else "L"
    Image.fromarray(np.zeros((height, width, 3) if mode == "RGB" else (height, width), np.uint8)).save(
        buf, format=fmt, **save
    )
    return buf.getvalue()


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "GIF", "BMP", "WEBP"])
def test_dimensions_match_what_pil_writes(fmt):
    data = encode(fmt, 37, 21)
    header = read_header(data)
    assert (header.format, header.width, header.height) == (fmt, 37, 21)


def test_progressive_jpeg_with_a_large_exif_block_before_the_frame():
    exif = Image.Exif()
    exif[0x010E] = "x" * 30000  # ImageDescription: pushes the SOF marker ~30 KB into the file
    data = encode("JPEG", 19, 7, progressive=True, exif=exif.tobytes())
    assert data.index(b"\xff\xc2") > 30000
    assert (read_header(data).width, read_header(data).height) == (19, 7)


def test_png_bomb_is_refused_from_its_header():
    bomb = png_bomb(13000, 13000)
    assert len(bomb) < 100_000
    with pytest.raises(InvalidInput) as info:
        check_image(bomb, 50_000_000, "in/bomb.png")
    msg = str(info.value)
    assert msg.startswith("in/bomb.png: PNG image of 13000 x 13000 = 169000000 pixels")
    assert "pixel budget of 50000000 (--max-image-pixels)" in msg
    assert check_image(png_bomb(100, 100), 10_000).pixels == 10_000  # at the budget: accepted


def test_jpeg_declaring_huge_dimensions_is_refused():
    data = bytearray(encode("JPEG", 8, 8))
    sof = data.index(b"\xff\xc0")
    data[sof + 5 : sof + 9] = struct.pack(">HH", 60000, 60000)
    with pytest.raises(InvalidInput, match="JPEG image of 60000 x 60000"):
        check_image(bytes(data), 50_000_000)


@pytest.mark.parametrize("fmt", ["GIF", "BMP", "WEBP"])
def test_only_jpeg_and_png_are_accepted_by_default(fmt):
    with pytest.raises(InvalidInput, match=f"{fmt} images are not accepted; expected JPEG or PNG"):
        check_image(encode(fmt, 4, 4), 100)
    assert check_image(encode(fmt, 4, 4), 100, formats=None).format == fmt


@pytest.mark.parametrize(
    "data, expected",
    [
        (b"", "empty object (0 bytes)"),
        (b"hello world", "not an image (11 bytes"),
        (b"\x89PNG\r\n\x1a\n\0\0", "PNG header is truncated or damaged"),
        (b"\xff\xd8\xff\xe0\0\x10JFIF", "JPEG header is truncated or damaged"),
        (b"\xff\xd8\xff\xda\0\x08", "no frame header"),
    ],
)
def test_unreadable_headers_are_bad_input(data, expected):
    with pytest.raises(InvalidInput) as info:
        read_header(data, "obj")
    assert str(info.value).startswith("obj: ") and expected in str(info.value)


def test_zero_dimension_is_bad_input():
    with pytest.raises(InvalidInput, match="declares 0 x 5 pixels"):
        read_header(png_bomb(0, 5))


def test_b64_images_in_a_request_are_checked_and_other_bytes_pass():
    bomb = base64.b64encode(png_bomb(9000, 9000)).decode()
    small = base64.b64encode(encode("PNG", 4, 4)).decode()
    example = base64.b64encode(b"\x0a\x0b serialized proto").decode()
    check_encoded_images({"instances": [{"b64": small}, {"b64": example}, {"b64": "!!not base64"}]}, 100)
    with pytest.raises(InvalidInput, match=r"request.instances\[1\].image_bytes: PNG image of 9000 x 9000"):
        check_encoded_images({"instances": [{"image_bytes": {"b64": small}}, {"image_bytes": {"b64": bomb}}]}, 10**6)
    with pytest.raises(InvalidInput, match=r"request.inputs: GIF image"):
        check_encoded_images({"inputs": {"b64": base64.b64encode(encode("GIF", 20, 20)).decode()}}, 100)


def test_sniff_recognises_magic_only():
    assert sniff(b"GIF89a....") == "GIF"
    assert sniff(b"RIFF\0\0\0\0WEBPVP8 ") == "WEBP"
    assert sniff(b"<html>") is None


def test_numeric_tensors_are_not_walked():
    class Exploding(list):
        def __iter__(self):
            raise AssertionError("a numeric tensor was walked element by element")

    tensor = Exploding([[[0.5] * 3] * 4] * 4)
    check_encoded_images({"instances": tensor, "inputs": {"x": Exploding([1, 2, 3])}}, 10)


@pytest.mark.parametrize("fmt", ["BMP", "WEBP", "GIF"])
def test_b64_budget_holds_for_every_known_format(fmt):
    text = base64.b64encode(encode(fmt, 40, 30)).decode()
    check_encoded_images({"instances": [{"b64": text}]}, 1200)
    with pytest.raises(InvalidInput, match=f"{fmt} image of 40 x 30 = 1200 pixels"):
        check_encoded_images({"instances": [{"b64": text}]}, 1199)


def test_b64_jpeg_whose_frame_header_is_deep_in_the_file():
    exif = Image.Exif()
    exif[0x010E] = "x" * 60000
    data = bytearray(encode("JPEG", 19, 7, exif=exif.tobytes()))
    sof = data.index(b"\xff\xc0")
    assert sof > 60000
    data[sof + 5 : sof + 9] = struct.pack(">HH", 20000, 20000)
    with pytest.raises(InvalidInput, match="JPEG image of 20000 x 20000"):
        check_encoded_images({"inputs": [{"b64": base64.b64encode(bytes(data)).decode()}]}, 10**6)
    truncated = base64.b64encode(bytes(data[: sof - 10])).decode()
    with pytest.raises(InvalidInput, match="JPEG header is truncated"):
        check_encoded_images({"inputs": [{"b64": truncated}]}, 10**6)


@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])
def test_a_file_cut_short_does_not_end_whole_and_padding_or_a_trailer_is_told_apart(fmt):
    buf = io.BytesIO()
    Image.fromarray(np.arange(3 * 40 * 30, dtype=np.uint8).reshape(40, 30, 3)).save(buf, format=fmt)
    body, png = buf.getvalue(), fmt == "PNG"
    assert ends_whole(body, png) and ends_whole(body + bytes(3000), png)  # zero padding after the end
    assert not ends_whole(body[:-1], png) and not ends_whole(body[: len(body) // 2], png)
    assert not ends_whole(body + b"a trailer", png) and not ends_whole(b"", png)
    assert not ends_whole(body, not png)  # the other format's end


def test_images_that_do_not_end_whole_go_alone_until_most_of_them_decode():
    whole, trailer = b"\xff\xd8 ... \xff\xd9", b"\xff\xd8 ... \xff\xd9 and a video"
    damaged = CutShort()
    assert not damaged.alone(whole, False)
    for _ in range(100):  # files cut short: each fails alone, and they keep going alone
        assert damaged.alone(trailer, False)
        damaged.outcome(False)
    mixed = CutShort()
    for n in range(2 * CutShort.TRIAL):
        assert mixed.alone(trailer, False)  # the trial (TRIAL decoded), then as many failed as decoded
        mixed.outcome(n % 2 == 1)
    assert mixed.alone(trailer, False) and (mixed.decoded, mixed.failed) == (16, 16)
    mixed.outcome(True)
    assert not mixed.alone(trailer, False)  # more decoded than failed, after the trial: batched
    assert not mixed.alone(whole, False)
