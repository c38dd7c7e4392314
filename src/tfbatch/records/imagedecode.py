"""Encoded JPEG/PNG images -> one image-tensor batch, decoded by TensorFlow off the GIL.

A model whose signature takes an image tensor ``[None, H, W, C]`` (the usual Keras export)
needs each encoded body decoded, resized and scaled on the host. Doing that with PIL one
object at a time holds the GIL for most of the work and starves the thread feeding the
model; :class:`ImageDecoder` does it with TensorFlow ops, whose kernels run without the GIL,
on a few shards of the batch at once (one TensorFlow call per shard, each from its own
thread), and reports a failed item by name without costing the others.

Why not ``tf.data``: a dataset built per batch spent more CPU per image on its own set-up
than the decode itself on 64x64 targets (the same decode and resize, measured on the dev
VM: ~1.4 ms of CPU per 22 KB JPEG through a dataset per batch of 64, ~0.6 ms through one
``map_fn`` call), and one call per shard keeps the per-item cost at the ops alone.

The rule, chosen to give what the PIL path gave (the tolerances are tested against PIL in
tests/integration/records/test_imagedecode.py):

- every body first passes :func:`tfbatch.records.images.check_image` (JPEG or PNG only,
  within the pixel budget) before TensorFlow sees it, so no decode allocates for a bomb;
- JPEG is decoded with libjpeg's accurate integer DCT (PIL's setting: identical pixels),
  PNG with libpng (palette expanded, alpha dropped for 1 or 3 channels, added as 255 for 4);
- 1 channel is PIL's luma, ``(19595 R + 38470 G + 7471 B + 32768) >> 16``, computed from
  RGB, so grey sources stay exact and colour sources give PIL's value;
- when both H and W are fixed and the image differs, it is resized with bilinear
  interpolation, antialiased (the triangle filter widens with the downscale factor, as
  PIL's BILINEAR resize does) in one float pass, then rounded half up to whole 0..255
  levels as PIL's 8-bit resize does: at most 1 level from PIL, and about one pixel in ten
  is one level away (PIL rounds between its width and height passes). RGBA is resampled
  with colour premultiplied by alpha, as PIL does (alpha within 1 level, colour times
  alpha within 2: un-premultiplying magnifies a level where alpha is tiny, in both).
  A same-size image is not resampled;
- float inputs get ``level / 255`` as float32 (values in [0, 1]); integer inputs get the
  levels as that dtype.

A damaged image fails the TensorFlow call it is in. A body that does not end as a whole file
does (:class:`tfbatch.records.images.CutShort`: cut short, the common damage) is decoded
alone; a shard that fails all the same is searched in parts (``batching.groups.BadRows``)
down to its damaged images. Neither changes any image's pixels or error, only how many calls
find them.

What differs from PIL: 16-bit PNGs keep their high byte here (PIL clips 16-bit grey to
255), and a resized pixel may be one level (1/255) away from PIL's.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from tfbatch.batching.groups import BadRows
from tfbatch.errors import InvalidInput
from tfbatch.records.images import DEFAULT_MAX_IMAGE_PIXELS, CutShort, check_image

CHANNELS = (1, 3, 4)
# PIL's RGB -> L weights in 16-bit fixed point (ITU-R 601-2 luma), with its rounding term.
_LUMA = (19595, 38470, 7471, 32768)


# Each shard is one TensorFlow call, whose own cost (tensors made from the bodies, the
# function's argument binding, a thread hand-off) is paid under the GIL: 64 JPEGs as 16
# shards of 4 took ~0.1 ms more CPU per image than as 2 of 32 on the 2-core VM, and on 16
# cores, 4 processes each cutting every batch into 16 shards for its 4 lane workers spent
# 1.9 ms of CPU per image where tf.data spent 1.3 (profile/sixteen-cores.md).
MIN_SHARD_IMAGES = 16


@dataclass(frozen=True, slots=True)
class ImageTarget:
    """What the model's input wants: size (None: keep the image's own), channels, dtype name."""

    height: int | None
    width: int | None
    channels: int = 3
    dtype: str = "float32"

    def __post_init__(self):
        if self.channels not in CHANNELS:
            raise InvalidInput(f"cannot decode an image into {self.channels} channels (expected 1, 3 or 4)")
        for name, value in (("height", self.height), ("width", self.width)):
            if value is not None and value <= 0:
                raise InvalidInput(f"image {name} {value} is not a size (expected a positive number)")
        if self.dtype == "string" or self.dtype.startswith("complex") or self.dtype == "bool":
            raise InvalidInput(f"an image tensor needs a numeric dtype, not {self.dtype}")

    @classmethod
    def of(cls, info, signature_name: str = "serving_default") -> ImageTarget:
        """The target for a signature input (runtime TensorInfo) shaped [batch,] H, W, C."""
        shape = info.shape
        if info.is_string or shape is None or len(shape) not in (3, 4):
            raise InvalidInput(
                f"input '{info.key}' of signature '{signature_name}' has dtype {info.dtype} and shape "
                f"{info.shape_str()}; an image body needs a string input (encoded bytes) or an image "
                "tensor [batch, height, width, channels]"
            )
        height, width, channels = shape[-3:]
        if channels not in (None, *CHANNELS):
            raise InvalidInput(
                f"input '{info.key}' of signature '{signature_name}' takes {channels} channels; "
                "an image decodes into 1, 3 or 4"
            )
        return cls(height, width, channels or 3, info.dtype)

    @property
    def fixed(self) -> bool:
        """Both sides known: every image is resized to them, so a batch stacks."""
        return bool(self.height and self.width)

    @property
    def scaled(self) -> bool:
        return self.dtype.startswith(("float", "bfloat"))


@dataclass
class DecodedImages:
    """One batch's result: ``array[k]`` is the image of ``bodies[rows[k]]``.

    ``errors`` maps the index of every body that failed to the InvalidInput naming it and
    saying what was expected; those bodies have no row.
    """

    array: np.ndarray
    rows: list[int]
    errors: dict[int, InvalidInput] = field(default_factory=dict)


class ImageDecoder:
    """Decodes batches of encoded images for one :class:`ImageTarget`; thread-safe, reusable.

    Up to ``workers`` shards run at once (default: the cores this process may use,
    ``usable_cores``; a job's instance passes its share of them), each of at least
    ``min_shard`` images (:func:`shard_size`); the calling thread runs one shard
    itself. Each shard decodes its images one after another, so peak memory is about one
    8-bit copy of one full-size image per shard: the resize's float buffer holds
    [H, image width], never a float copy of the image.
    """

    def __init__(self, target: ImageTarget, *, max_pixels: int = DEFAULT_MAX_IMAGE_PIXELS,
                 workers: int | None = None, min_shard: int = MIN_SHARD_IMAGES):
        from tfbatch.runtime.placement import usable_cores

        self.target = target
        self.max_pixels = max_pixels
        self.workers = max(1, workers or usable_cores())
        self.min_shard = max(1, min_shard)
        self.bad = BadRows()  # how finely a shard that failed is cut (_shard)
        self.cut_short = CutShort()  # which images go alone: those cut short (decode)
        self.calls = 0  # decode calls made (TensorFlow function calls)
        self._fn = None
        self._pool: ThreadPoolExecutor | None = None
        self._pool_pid = os.getpid()
        self._lock = threading.Lock()

    def decode(self, bodies: Sequence[bytes], sources: Sequence[str] | None = None) -> DecodedImages:
        """Decode ``bodies`` (``sources`` name them in errors: object keys, record numbers).

        Never raises for a bad body; with no fixed size (H or W is None), the images that
        decode must all have one size to stack, and any other size is that item's error
        (:meth:`decode_sized` keeps every size).
        """
        names = self._names(bodies, sources)
        if not self.target.fixed:
            groups, errors = self._by_size(bodies, names)
            if not groups:
                return DecodedImages(self._stack([]), [], errors)
            (first_rows, first), *others = groups
            height, width = first[0].shape[1:3]
            for rows, arrays in others:
                for row in rows:
                    errors[row] = InvalidInput(
                        f"{names[row]}: image is {arrays[0].shape[2]} x {arrays[0].shape[1]} pixels; the input "
                        f"fixes no size, so every image in one batch must match the first ({width} x {height})"
                    )
            # Only the kept size is stacked (and scaled): the others are errors.
            return DecodedImages(self._stack(first), first_rows, dict(sorted(errors.items())))
        errors: dict[int, InvalidInput] = {}
        admitted = self._admit(bodies, names, errors)
        # A body cut short fails the call of every image in its shard: it goes alone instead.
        whole, cut = [], []
        for item in admitted:
            (cut if self.cut_short.alone(bodies[item[0]], item[1]) else whole).append(item)
        rows: list[int] = []
        arrays: list[np.ndarray] = []
        for shard_rows, array, shard_errors in self._in_shards(whole, bodies, names):
            errors.update(shard_errors)
            if shard_rows:
                rows.extend(shard_rows)
                arrays.append(array)
        if cut:
            # One call each; not counted in ``self.bad``, which steers the search of shards that
            # hold none of them.
            cut_rows, cut_arrays = [], []
            for item in cut:
                array, exc = self._call([item], bodies)
                self.cut_short.outcome(array is not None)
                if array is None:
                    errors[item[0]] = self._failed(item, names, exc)
                else:
                    cut_rows.append(item[0])
                    cut_arrays.append(array)
            if cut_rows:
                # Back in input order, a row at a time (views of the shards' arrays), stacked once below.
                every = rows + cut_rows
                pieces = [image[None] for array in arrays for image in array] + cut_arrays
                order = sorted(range(len(every)), key=every.__getitem__)
                rows, arrays = [every[k] for k in order], [pieces[k] for k in order]
        return DecodedImages(self._stack(arrays), rows, dict(sorted(errors.items())))

    def decode_sized(self, bodies: Sequence[bytes],
                     sources: Sequence[str] | None = None) -> tuple[list[DecodedImages], dict[int, InvalidInput]]:
        """Images that keep their own size: one batch per size, and every failed body's error.

        For an input that fixes no size (``[N, None, None, C]``), where images of different
        sizes cannot stack: the images are decoded one per TensorFlow call, in parallel
        shards (off the GIL, as :meth:`decode`), then grouped by size in the order each size
        first appears. A fixed target resizes every image, so it gives at most one group.
        """
        names = self._names(bodies, sources)
        if self.target.fixed:
            result = self.decode(bodies, names)
            return ([result] if result.rows else []), result.errors
        groups, errors = self._by_size(bodies, names)
        return [DecodedImages(self._stack(arrays), rows) for rows, arrays in groups], errors

    def decode_one(self, body: bytes, source: str = "body") -> np.ndarray:
        """One image as a batch of one, [1, H, W, C]; raises the InvalidInput that names it."""
        result = self.decode([body], [source])
        if result.errors:
            raise result.errors[0]
        return result.array

    def prepare(self) -> threading.Thread:
        """Trace the decode functions on a background thread, now, instead of inside the first batch.

        Tracing costs a few hundred ms of CPU; started when the job opens, it overlaps the
        listing and the first reads, and the first ``decode`` waits for it (the same lock).
        """
        thread = threading.Thread(target=self._trace, name="imagedecode-trace", daemon=True)
        thread.start()
        return thread

    def _trace(self) -> None:
        try:
            many, single = self._functions()
            many.get_concrete_function()
            single.get_concrete_function()
        except Exception:  # noqa: BLE001 - the first decode traces again and reports it
            pass

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)

    # ---- internals ------------------------------------------------------------------

    @staticmethod
    def _names(bodies, sources) -> list[str]:
        names = list(sources) if sources is not None else [f"image {i}" for i in range(len(bodies))]
        if len(names) != len(bodies):
            raise ValueError(f"{len(bodies)} bodies but {len(names)} sources")
        return names

    def _admit(self, bodies, names, errors) -> list[tuple[int, bool]]:
        """[(index, is_png)] of the bodies whose header passes; the others' errors into ``errors``."""
        admitted: list[tuple[int, bool]] = []
        for i, body in enumerate(bodies):
            try:
                header = check_image(body, self.max_pixels, names[i])
            except InvalidInput as exc:
                errors[i] = exc
                continue
            admitted.append((i, header.format == "PNG"))
        return admitted

    def _in_shards(self, admitted, bodies, names, *, each: bool = False):
        """``admitted`` in up to ``workers`` shards at once; ``each``: one call per image, each
        shard giving (rows, [array per row], errors), else one call per shard (:meth:`_shard`)."""
        work = self._each if each else self._shard
        # One call per image either way with ``each``: only the thread count matters there.
        size = shard_size(len(admitted), self.workers, 1 if each else self.min_shard)
        if size >= len(admitted):
            return [work(admitted, bodies, names)] if admitted else []
        shards = [admitted[k:k + size] for k in range(0, len(admitted), size)]
        futures = [self._executor().submit(work, shard, bodies, names) for shard in shards[1:]]
        first = work(shards[0], bodies, names)
        return [first, *(f.result() for f in futures)]

    def _by_size(self, bodies, names):
        """([(rows, [8-bit array per row])] per size, in order of first appearance; errors by
        body index): each admitted body decoded alone, in parallel shards, not yet stacked."""
        errors: dict[int, InvalidInput] = {}
        admitted = self._admit(bodies, names, errors)
        by_size: dict[tuple[int, ...], tuple[list[int], list[np.ndarray]]] = {}
        for shard_rows, arrays, shard_errors in self._in_shards(admitted, bodies, names, each=True):
            errors.update(shard_errors)
            for row, array in zip(shard_rows, arrays):
                rows, group = by_size.setdefault(array.shape, ([], []))
                rows.append(row)
                group.append(array)
        return list(by_size.values()), dict(sorted(errors.items()))

    def _each(self, items, bodies, names):
        """(rows, arrays, errors) for ``items``, one image per call: each keeps its own size."""
        rows, arrays, errors = [], [], {}
        for item in items:
            r, a, e = self._shard([item], bodies, names)
            errors.update(e)
            if r:
                rows.extend(r)
                arrays.append(a)
        return rows, arrays, errors

    def _shard(self, items, bodies, names):
        """(rows, array, errors) for ``items`` = [(index, is_png)]: one call; where it fails, the
        items go again in parts, a failing part cut again (``batching.groups.BadRows``), down to
        the damaged images, each alone. A failed shard went one image per call; with 1 % of the
        images damaged, 1 - 0.99^32 = 28 % of the shards of 32 fail."""
        array, exc = self._call(items, bodies)
        if array is not None:
            self.bad.seen(len(items))
            return [i for i, _ in items], array, {}
        if len(items) > 1:
            # Some image in the shard is damaged past its header: find it, keep the rest.
            answers = self.bad.search(items, lambda part: self._part(part, bodies),
                                      lambda item: self._alone(item, bodies, names))
        else:
            self.bad.seen(1)
            self.bad.failed_alone(1)
            answers = [self._failed(items[0], names, exc)]
        rows, arrays, errors = [], [], {}
        for (i, _), answer in zip(items, answers):
            if isinstance(answer, InvalidInput):
                errors[i] = answer
            else:
                rows.append(i)
                arrays.append(answer)
        return rows, (np.concatenate(arrays) if arrays else None), errors

    def _call(self, items, bodies):
        """(8-bit images [len(items), H, W, C], None), or (None, the decode's error): one call."""
        from tfbatch.runtime.tf_import import import_tensorflow

        tf = import_tensorflow()
        many, single = self._functions()
        with self._lock:
            self.calls += 1
        try:
            if len(items) == 1:
                images = single(tf.constant(bodies[items[0][0]], dtype=tf.string), tf.constant(items[0][1]))
            else:
                images = many(tf.constant([bodies[i] for i, _ in items], dtype=tf.string),
                              tf.constant([png for _, png in items], dtype=tf.bool))
            return images.numpy(), None
        except tf.errors.InvalidArgumentError as exc:
            return None, exc

    def _part(self, part, bodies) -> list[np.ndarray] | None:
        """Each image of ``part`` as [1, H, W, C] from one call, or None where that call failed."""
        array, _ = self._call(part, bodies)
        if array is None:
            return None
        self.bad.seen(len(part))
        return [array[k:k + 1] for k in range(len(part))]

    def _alone(self, item, bodies, names) -> np.ndarray | InvalidInput:
        array, exc = self._call([item], bodies)
        self.bad.seen(1)
        if array is not None:
            return array
        self.bad.failed_alone(1)
        return self._failed(item, names, exc)

    @staticmethod
    def _failed(item, names, exc) -> InvalidInput:
        (i, png) = item
        return _undecodable(names[i], "PNG" if png else "JPEG", exc)

    def _stack(self, arrays: list[np.ndarray]) -> np.ndarray:
        if not arrays:
            h, w = self.target.height or 0, self.target.width or 0
            return np.zeros((0, h, w, self.target.channels), np.float32 if self.target.scaled else self.target.dtype)
        # Scaled here, not in the graph: TensorFlow divides by multiplying with 1/255, one
        # float32 ulp away from PIL-era ``level / 255`` for some levels. One float copy,
        # divided in place: a second one cost page faults as large as the copy on full-size
        # images (an input that fixes no size).
        if self.target.scaled:
            out = arrays[0].astype(np.float32) if len(arrays) == 1 else np.concatenate(arrays, dtype=np.float32)
            out /= np.float32(255.0)
            return out
        array = arrays[0] if len(arrays) == 1 else np.concatenate(arrays)
        return array if array.dtype == np.dtype(self.target.dtype) else array.astype(self.target.dtype)

    def _executor(self) -> ThreadPoolExecutor:
        with self._lock:
            # A forked child inherits the pool object but not its threads: work submitted
            # there would never run, so a child builds its own.
            if self._pool is None or self._pool_pid != os.getpid():
                self._pool = ThreadPoolExecutor(self.workers - 1, thread_name_prefix="imagedecode")
                self._pool_pid = os.getpid()
            return self._pool

    def _functions(self):
        with self._lock:
            if self._fn is None:
                self._fn = _build(self.target)
            return self._fn


def _undecodable(source: str, kind: str, exc: BaseException) -> InvalidInput:
    from tfbatch.runtime.servable import tf_error_message

    return InvalidInput(
        f"{source}: {kind} data could not be decoded past its header ({tf_error_message(exc)}); "
        f"expected a complete {kind} image"
    )


def _build(target: ImageTarget):
    """The traced TensorFlow functions, (bodies [n] string, is_png [n] bool) -> uint8 [n, H, W, C],
    and the same for one image (scalars) -> [1, H, W, C]."""
    from tfbatch.runtime.tf_import import import_tensorflow

    tf = import_tensorflow()
    channels = target.channels
    size = [target.height, target.width] if target.fixed else None

    def decode(data, is_png):
        def png():
            return tf.io.decode_png(data, channels=4 if channels == 4 else 3)

        def jpeg():
            rgb = tf.io.decode_jpeg(data, channels=3, dct_method="INTEGER_ACCURATE")
            if channels != 4:
                return rgb
            opaque = tf.fill(tf.concat([tf.shape(rgb)[:2], [1]], 0), tf.constant(255, tf.uint8))
            return tf.concat([rgb, opaque], -1)

        image = tf.cond(is_png, png, jpeg)
        if channels == 1:
            r, g, b = (tf.cast(image[..., k], tf.int32) for k in range(3))
            luma = tf.bitwise.right_shift(r * _LUMA[0] + g * _LUMA[1] + b * _LUMA[2] + _LUMA[3], 16)
            image = tf.cast(luma, tf.uint8)[..., tf.newaxis]
        if size is None:
            return image

        def resized():
            # PIL resamples RGBA with colour premultiplied by alpha, so that transparent
            # pixels do not bleed their colour into neighbours; done the same way here.
            source = _premultiply(tf, image) if channels == 4 else image
            out = _resample(tf, source, size)
            return _unpremultiply(tf, out) if channels == 4 else out

        same = tf.reduce_all(tf.equal(tf.shape(image)[:2], size))
        return tf.ensure_shape(tf.cond(same, lambda: image, resized), [*size, channels])

    spec = tf.TensorSpec([*(size or [None, None]), channels], tf.uint8)

    # autograph=False: the bodies hold no Python control flow to convert (the branches are
    # tf.cond already), and converting them was most of the first batch's 0.6 s of tracing.
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string), tf.TensorSpec([None], tf.bool)],
                 autograph=False)
    def decode_batch(data, is_png):  # -> uint8 levels
        # One image at a time per call: the shards, not the loop, give the parallelism, and
        # peak memory stays one full-size image per shard. On the CPU, as tf.data's ops are:
        # where a GPU is visible TensorFlow would otherwise place the resize there, a copy of
        # each full-size image to the device and back per loop step.
        with tf.device("/CPU:0"):
            return tf.map_fn(lambda a: decode(a[0], a[1]), (data, is_png), fn_output_signature=spec,
                             parallel_iterations=1)

    @tf.function(input_signature=[tf.TensorSpec([], tf.string), tf.TensorSpec([], tf.bool)], autograph=False)
    def decode_single(data, is_png):
        # A request of one image (the endpoint) skips the loop: ~1.25 vs ~1.8 ms of CPU per image.
        with tf.device("/CPU:0"):
            return decode(data, is_png)[tf.newaxis]

    return decode_batch, decode_single


def _resample(tf, image, size):
    """uint8 [h, w, C] -> uint8 [*size, C]: antialiased bilinear, rounded half up to levels.

    One float pass. PIL runs the width, rounds to 8 bits, then the height; doing the same
    here (two resizes, the first on the transposed image so no float copy of a large
    image is made) gave PIL's pixels all but exactly, but cost 1.8x the CPU of this pass
    (1.48 vs 0.83 ms per ~22 KB JPEG to 64 x 64), for a difference of one level in about
    one pixel in ten.

    An image that grows on both axes (or keeps one) takes TensorFlow's plain bilinear
    kernel: antialiasing only widens the filter when shrinking, so the two compute the same
    sums (equal to float rounding: a level apart only where a value sits on a half level,
    ~1 pixel in 5,000 at uneven factors), and the general antialiased kernel cost 4x the
    CPU on a 32 x 32 PNG grown to 64 x 64 (0.15 against 0.035 ms an image).
    """
    grows = tf.reduce_all(tf.shape(image)[-3:-1] <= tf.constant(size))
    out = tf.cond(grows,
                  lambda: tf.image.resize(image, size, method="bilinear", antialias=False),
                  lambda: tf.image.resize(image, size, method="bilinear", antialias=True))
    return tf.cast(tf.clip_by_value(tf.floor(out + 0.5), 0.0, 255.0), tf.uint8)


def _premultiply(tf, image):
    """RGBA -> RGBa with PIL's rounding: c * a / 255 as ((t >> 8) + t) >> 8, t = c * a + 128."""
    x = tf.cast(image, tf.int32)
    alpha = x[..., 3:]
    t = x[..., :3] * alpha + 128
    rgb = tf.bitwise.right_shift(tf.bitwise.right_shift(t, 8) + t, 8)
    return tf.cast(tf.concat([rgb, alpha], -1), tf.uint8)


def _unpremultiply(tf, image):
    """RGBa -> RGBA as PIL does: 255 * c // a (at most 255); alpha 0 or 255 leaves c as it is."""
    x = tf.cast(image, tf.int32)
    alpha = x[..., 3:]
    rgb = tf.minimum(255, (255 * x[..., :3]) // tf.maximum(alpha, 1))
    rgb = tf.where((alpha == 0) | (alpha == 255), x[..., :3], rgb)
    return tf.cast(tf.concat([rgb, alpha], -1), tf.uint8)


@lru_cache(maxsize=32)
def decoder_for(target: ImageTarget, max_pixels: int = DEFAULT_MAX_IMAGE_PIXELS,
                workers: int | None = None) -> ImageDecoder:
    """A shared decoder per (target, budget, workers): the traced function and threads are built once."""
    return ImageDecoder(target, max_pixels=max_pixels, workers=workers)


def shard_size(images: int, workers: int, least: int = 1) -> int:
    """Images per shard for a batch of ``images``: spread over up to ``workers`` shards, each
    of at least ``least`` images (``images`` itself where one shard takes them all)."""
    if images <= 0:
        return 0
    count = max(1, min(workers, images // max(1, least)))
    return -(-images // count)
