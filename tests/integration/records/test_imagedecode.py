"""The TensorFlow image decoder against PIL (the decoder it replaced) on real photos.

The reference is the PIL path tfbatch used before: open, ``convert`` to L/RGB/RGBA,
``resize(BILINEAR)`` when the size differs, then ``/ 255`` for float inputs. The rule in
tfbatch.records.imagedecode promises: same-size images identical, resized pixels at most
one level (1/255) away.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from tfbatch.records.imagedecode import ImageDecoder, ImageTarget
from tfbatch.testing.hostile import png_bomb

MODES = {1: "L", 3: "RGB", 4: "RGBA"}


def _photos() -> list[np.ndarray]:
    from skimage import data

    coffee, astronaut = data.coffee(), data.astronaut()  # real photographs, 400 x 600 and 512 x 512
    return [coffee, astronaut[40:340, 100:500], coffee[::3, ::3]]


def _encode(array: np.ndarray, fmt: str, **options) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(array).save(buf, format=fmt, **options)
    return buf.getvalue()


def pil_reference(body: bytes, target: ImageTarget) -> np.ndarray:
    with Image.open(io.BytesIO(body)) as img:
        img = img.convert(MODES[target.channels])
        if target.fixed and img.size != (target.width, target.height):
            img = img.resize((target.width, target.height), Image.BILINEAR)
        array = np.asarray(img).reshape(img.size[1], img.size[0], target.channels)
    return array.astype(np.float32) / 255.0 if target.scaled else array.astype(target.dtype)


@pytest.fixture(scope="module")
def bodies() -> dict[str, list[bytes]]:
    photos = _photos()
    rgba = np.dstack([photos[1], np.linspace(0, 255, photos[1].size // 3).astype(np.uint8).reshape(photos[1].shape[:2])])
    return {
        "JPEG": [_encode(p, "JPEG", quality=90) for p in photos],
        "PNG": [_encode(p, "PNG") for p in photos] + [_encode(rgba, "PNG"), _encode(photos[2][..., 0], "PNG")],
        "grey JPEG": [_encode(photos[0][..., 1], "JPEG", quality=85)],
    }


@pytest.mark.parametrize("kind", ["JPEG", "PNG", "grey JPEG"])
@pytest.mark.parametrize("channels", [1, 3, 4])
@pytest.mark.parametrize("size, dtype", [((64, 64), "float32"), ((224, 160), "uint8"), ((800, 700), "float32")])
def test_resized_images_are_within_one_level_of_pil(bodies, kind, channels, size, dtype):
    # 64 x 64 shrinks every photo, 800 x 700 enlarges every one, 224 x 160 both (the
    # small photo grows in height); the aspect ratio changes too.
    target = ImageTarget(*size, channels, dtype)
    result = ImageDecoder(target, workers=2).decode(bodies[kind])
    assert result.errors == {} and result.rows == list(range(len(bodies[kind])))
    assert result.array.shape == (len(bodies[kind]), *size, channels)
    assert result.array.dtype == (np.float32 if target.scaled else np.uint8)
    for row, body in enumerate(bodies[kind]):
        with Image.open(io.BytesIO(body)) as img:
            shrinks = img.height >= size[0] and img.width >= size[1]
        ours, pils = _as_levels(result.array[row], target), _as_levels(pil_reference(body, target), target)
        if channels == 4:
            # Both resample colour premultiplied by alpha; where alpha is tiny, un-premultiplying
            # turns a one-level rounding difference into many, so compare what is visible.
            assert np.abs(ours[..., 3] - pils[..., 3]).max() <= 1
            ours, pils = ours[..., :3] * ours[..., 3:] / 255, pils[..., :3] * pils[..., 3:] / 255
            assert np.abs(ours - pils).max() <= 2, f"{kind} #{row}"
            continue
        diff = np.abs(ours - pils)
        assert diff.max() <= 1, f"{kind} #{row}: {diff.max()} levels from PIL"
        # PIL rounds between its two passes, we do not: some pixels land one level away.
        assert (diff > 0).mean() < (0.2 if shrinks else 0.3), f"{kind} #{row}: {(diff > 0).mean():.2%} differ"


def _as_levels(array: np.ndarray, target: ImageTarget) -> np.ndarray:
    return np.round(array.astype(np.float64) * (255.0 if target.scaled else 1.0))


@pytest.mark.parametrize("channels", [1, 3, 4])
def test_images_already_at_the_size_are_pils_pixels_exactly(bodies, channels):
    jpeg = bodies["JPEG"][0]
    target = ImageTarget(400, 600, channels, "float32")
    array = ImageDecoder(target).decode_one(jpeg)
    np.testing.assert_array_equal(array[0], pil_reference(jpeg, target))


def test_free_size_keeps_each_image_and_a_batch_holds_one_size(bodies):
    target = ImageTarget(None, None, 3, "uint8")
    jpeg = bodies["JPEG"]
    result = ImageDecoder(target).decode([jpeg[0], jpeg[1], jpeg[0]], ["a.jpg", "b.jpg", "c.jpg"])
    assert result.rows == [0, 2] and result.array.shape == (2, 400, 600, 3)
    np.testing.assert_array_equal(result.array[1], pil_reference(jpeg[0], target))
    assert "b.jpg: image is 400 x 300 pixels; the input fixes no size" in str(result.errors[1])


def test_decode_sized_groups_images_by_size_in_order_of_first_appearance(bodies):
    target = ImageTarget(None, None, 3, "float32")
    jpeg, png = bodies["JPEG"], bodies["PNG"]
    many = [jpeg[1], jpeg[0], b"not an image", jpeg[1], png[0], jpeg[2], jpeg[1]]
    names = [f"n{i}" for i in range(len(many))]
    groups, errors = ImageDecoder(target, workers=3).decode_sized(many, names)
    alone, _ = ImageDecoder(target, workers=1).decode_sized(many, names)
    assert [g.rows for g in groups] == [g.rows for g in alone] == [[0, 3, 6], [1, 4], [5]]
    assert [g.array.shape for g in groups] == [(3, 300, 400, 3), (2, 400, 600, 3), (1, 134, 200, 3)]
    assert list(errors) == [2] and errors[2].args[0].startswith("n2: not an image")
    for group, other in zip(groups, alone):
        np.testing.assert_array_equal(group.array, other.array)  # shards do not change a pixel
        assert group.array.dtype == np.float32 and group.errors == {}
        for k, row in enumerate(group.rows):
            np.testing.assert_array_equal(group.array[k], pil_reference(many[row], target))
    fixed, _ = ImageDecoder(ImageTarget(16, 16, 3, "uint8")).decode_sized(many, names)
    assert [g.rows for g in fixed] == [[0, 1, 3, 4, 5, 6]]  # a fixed size resizes all: one batch


def test_bad_items_cost_only_themselves_and_are_named(bodies):
    good = bodies["JPEG"] + bodies["PNG"][:1]
    photo = _photos()[2]
    bad = {
        "cut.jpg": good[0][: len(good[0]) // 3],  # a valid header, then the data stops
        "anim.gif": _encode(photo, "GIF"),
        "photo.bmp": _encode(photo, "BMP"),
        "photo.webp": _encode(photo, "WEBP"),
        "bomb.png": png_bomb(),
        "empty.jpg": b"",
        "notes.txt": b"these are not pixels",
    }
    bodies_in = [good[0], bad["cut.jpg"], good[1], bad["anim.gif"], bad["photo.bmp"], good[2],
                 bad["photo.webp"], bad["bomb.png"], bad["empty.jpg"], good[3], bad["notes.txt"]]
    names = ["a.jpg", "cut.jpg", "b.jpg", "anim.gif", "photo.bmp", "c.jpg", "photo.webp", "bomb.png",
             "empty.jpg", "d.png", "notes.txt"]
    target = ImageTarget(64, 64, 3, "float32")
    result = ImageDecoder(target, workers=3, min_shard=1).decode(bodies_in, names)  # 3 shards of 4

    assert result.rows == [0, 2, 5, 9]
    alone = ImageDecoder(target, workers=1).decode(good)
    np.testing.assert_array_equal(result.array, alone.array)  # neighbours of a bad item unchanged
    messages = {names[i]: str(e) for i, e in result.errors.items()}
    assert set(messages) == set(bad)
    assert messages["cut.jpg"].startswith("cut.jpg: JPEG data could not be decoded past its header")
    assert messages["cut.jpg"].endswith("expected a complete JPEG image")
    for name, kind in (("anim.gif", "GIF"), ("photo.bmp", "BMP"), ("photo.webp", "WEBP")):
        assert messages[name] == f"{name}: {kind} images are not accepted; expected JPEG or PNG"
    assert "bomb.png: PNG image of 13000 x 13000 = 169000000 pixels exceeds the pixel budget" in messages["bomb.png"]
    assert messages["empty.jpg"].startswith("empty.jpg: empty object (0 bytes)")
    assert messages["notes.txt"].startswith("notes.txt: not an image (20 bytes")


def test_a_shard_with_damaged_images_is_searched_in_parts_not_image_by_image(bodies):
    good = bodies["JPEG"] * 16  # 48 images, one shard
    # Damaged inside (500 bytes of 0xFF midway), yet ending as a whole JPEG does (its end-of-image
    # marker): libjpeg gives up on it, and it fails the call it is in.
    half = len(good[0]) // 2
    broken = good[0][:half] + b"\xff" * 500 + good[0][half + 500:]
    damaged = {7, 30}
    bodies_in = [broken if i in damaged else body for i, body in enumerate(good)]
    target = ImageTarget(32, 32, 3, "uint8")
    decoder = ImageDecoder(target, workers=1)
    result = decoder.decode(bodies_in, [f"{i}.jpg" for i in range(len(bodies_in))])

    assert result.rows == [i for i in range(len(good)) if i not in damaged]
    assert sorted(result.errors) == sorted(damaged)
    assert all(str(result.errors[i]).startswith(f"{i}.jpg: JPEG data could not be decoded") for i in damaged)
    np.testing.assert_array_equal(result.array, ImageDecoder(target, workers=1).decode(
        [b for i, b in enumerate(good) if i not in damaged]).array)
    # The shard's call, then halves down to the two damaged images (24 calls, deterministic for
    # a new decoder), where one call per image made 49.
    assert 1 < decoder.calls <= 25


def test_images_cut_short_are_decoded_alone_and_their_shard_keeps_its_one_call(bodies):
    good = bodies["JPEG"] * 8 + bodies["PNG"] * 4  # 44 images
    cut_jpeg, cut_png = good[0][:2000], good[24][: len(good[24]) // 2]
    bodies_in = list(good)
    bodies_in[5], bodies_in[30] = cut_jpeg, cut_png
    bodies_in[11] = good[11] + b"a trailer after the end-of-image marker"  # whole, but does not end as one
    bodies_in[12] = good[12] + bytes(40)  # zero padding: still ends whole
    target = ImageTarget(32, 32, 3, "uint8")
    decoder = ImageDecoder(target, workers=1)
    result = decoder.decode(bodies_in, [f"image {i}" for i in range(len(bodies_in))])

    assert sorted(result.errors) == [5, 30]
    assert str(result.errors[5]).startswith("image 5: JPEG data could not be decoded")
    assert str(result.errors[30]).startswith("image 30: PNG data could not be decoded")
    kept = [i for i in range(len(good)) if i not in (5, 30)]
    assert result.rows == kept  # input order, the one decoded alone (11) in its place
    np.testing.assert_array_equal(result.array, ImageDecoder(target, workers=1).decode([good[i] for i in kept]).array)
    assert decoder.calls == 1 + 3  # the shard of 41, then 5, 11 and 30 alone
    # Their failures do not steer how a failed shard is cut: none of them was in one.
    assert decoder.bad.requests_failed_alone == 0 and decoder.cut_short.failed == 2


def test_whole_images_with_a_trailer_go_alone_only_until_they_prove_whole(bodies):
    # A Motion Photo's shape: a whole JPEG with more bytes after its end-of-image marker.
    trailed = [body + b"ftypmp42 and a video after the image" for body in bodies["JPEG"] * 7]  # 21
    target = ImageTarget(32, 32, 3, "uint8")
    decoder = ImageDecoder(target, workers=1)
    first = decoder.decode(trailed)
    assert first.rows == list(range(21)) and decoder.calls == 21  # each alone: the trial
    second = decoder.decode(trailed)
    assert second.rows == list(range(21)) and decoder.calls == 22  # then one call for them all
    np.testing.assert_array_equal(first.array, second.array)
    np.testing.assert_array_equal(second.array, decoder.decode(bodies["JPEG"] * 7).array)


def test_shards_keep_input_order(bodies):
    many = (bodies["JPEG"] + bodies["PNG"]) * 3
    target = ImageTarget(32, 48, 3, "uint8")
    one = ImageDecoder(target, workers=1).decode(many)
    four = ImageDecoder(target, workers=4, min_shard=1).decode(many)
    assert one.rows == four.rows == list(range(len(many)))
    np.testing.assert_array_equal(one.array, four.array)
    for row in (0, 4, len(many) - 1):
        np.testing.assert_array_equal(one.array[row], ImageDecoder(target).decode_one(many[row])[0])


def test_decode_one_raises_the_items_error(bodies):
    from tfbatch.errors import InvalidInput

    with pytest.raises(InvalidInput, match="upload.gif: GIF images are not accepted"):
        ImageDecoder(ImageTarget(8, 8)).decode_one(_encode(_photos()[2], "GIF"), "upload.gif")


def test_the_decode_runs_on_the_cpu_whatever_devices_are_visible():
    # On a GPU host TensorFlow would place the resize on the device: a copy of each full-size
    # image there and back per loop step. Every op of both traced functions is pinned instead
    # (checked on the graphs, so it holds on a machine without a GPU too).
    from tfbatch.records.imagedecode import _build

    for target in (ImageTarget(64, 64, 3, "float32"), ImageTarget(None, None, 1, "uint8")):
        for fn in _build(target):
            graph = fn.get_concrete_function().graph.as_graph_def()
            # The graph's own nodes but its inputs and outputs, and every node of the loop's and
            # the branches' bodies.
            nodes = [n for n in graph.node if n.op not in ("Placeholder", "Identity", "NoOp")]
            nodes += [n for f in graph.library.function for n in f.node_def]
            assert len(nodes) > 20
            assert all(n.device.endswith("CPU:0") for n in nodes), \
                sorted({(n.op, n.device) for n in nodes if not n.device.endswith("CPU:0")})


@pytest.mark.parametrize("source, size", [((32, 32), (64, 64)), ((17, 23), (64, 64)), ((10, 10), (11, 13)),
                                          ((64, 48), (64, 96)), ((1, 1), (8, 8))])
def test_an_image_that_grows_gets_the_antialiased_kernels_levels(source, size):
    # Growing images take TensorFlow's plain bilinear kernel (imagedecode._resample): the sums
    # of the antialiased one, to float rounding, so a level apart only on a half level.
    import tensorflow as tf

    pixels = np.random.default_rng(sum(source)).integers(0, 256, (*source, 3), dtype=np.uint8)
    got = ImageDecoder(ImageTarget(*size, 3, "uint8")).decode_one(_encode(pixels, "PNG"))[0]
    exact = tf.image.resize(pixels, size, method="bilinear", antialias=True).numpy()
    want = np.clip(np.floor(exact + 0.5), 0, 255)
    diff = np.abs(got.astype(np.int32) - want)
    assert diff.max() <= 1
    # Only where the antialiased kernel's value is on a half level can the rounding differ.
    assert np.all(np.abs(exact - np.floor(exact) - 0.5)[diff > 0] < 1e-3)
    assert (diff > 0).mean() < 0.005
