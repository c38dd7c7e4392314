"""A JPEG dataset shaped like Open Images, made from real photos that ship offline.

The seed's job reads the Open Images "Challenge 2018/2019" test set: ~100 KB–200 KB
JPEGs of varied sizes, named by 16 hex digits. No dataset host is reachable here, so the
photos inside scikit-image (``skimage.data``) and scikit-learn (sample images) are cut
into random crops at random scales and JPEG qualities, with a little sensor-like noise
(upscaled crops are smoother than real photos and would compress too well), until each
file lands in the requested size range. Same seed and count -> byte-identical files.

    python -m benchmarks.common.dataset --out DIR --count N [--seed 0]
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

# Real photographs (not synthetic test patterns) that load without a network.
SKIMAGE_PHOTOS = (
    "astronaut", "coffee", "chelsea", "rocket", "hubble_deep_field", "retina",
    "immunohistochemistry", "camera", "grass", "gravel", "brick", "moon", "coins", "clock",
)
SKLEARN_PHOTOS = ("china.jpg", "flower.jpg")

MIN_BYTES = 100 * 1024
MAX_BYTES = 200 * 1024
MAX_SIDE = 2048.0
GENERATOR_VERSION = 2  # bump when the bytes change, so cached datasets are regenerated


@dataclass(frozen=True)
class ImageFile:
    name: str
    source: str
    width: int
    height: int
    quality: int
    size: int


@lru_cache(maxsize=1)
def source_photos() -> tuple[tuple[str, np.ndarray], ...]:
    """(name, uint8 RGB array) for every photo available offline, in a fixed order."""
    import skimage.data
    from sklearn.datasets import load_sample_images

    photos: list[tuple[str, np.ndarray]] = []
    for name in SKIMAGE_PHOTOS:
        try:
            image = getattr(skimage.data, name)()
        except Exception:  # noqa: BLE001 - a photo that needs a download is skipped
            continue
        photos.append((f"skimage.{name}", _rgb(image)))
    try:
        left, _, _ = skimage.data.stereo_motorcycle()
        photos.append(("skimage.stereo_motorcycle", _rgb(left)))
    except Exception:  # noqa: BLE001
        pass
    samples = load_sample_images()
    for filename, image in zip(samples.filenames, samples.images):
        photos.append((f"sklearn.{Path(filename).name}", _rgb(image)))
    if not photos:
        raise RuntimeError("no sample photos found in scikit-image or scikit-learn")
    return tuple(photos)


def _rgb(image: np.ndarray) -> np.ndarray:
    image = np.asarray(image)
    if image.dtype != np.uint8:
        image = (np.clip(image, 0, 1) * 255).astype(np.uint8) if image.dtype.kind == "f" else image.astype(np.uint8)
    if image.ndim == 2:
        image = np.stack([image] * 3, axis=-1)
    return np.ascontiguousarray(image[..., :3])


def file_name(seed: int, index: int) -> str:
    """16 hex digits, like Open Images ids; sorted names shuffle the sources."""
    return hashlib.sha256(f"tfbatch-bench:{seed}:{index}".encode()).hexdigest()[:16] + ".jpg"


def make_jpeg(seed: int, index: int, min_bytes: int = MIN_BYTES, max_bytes: int = MAX_BYTES) -> tuple[bytes, ImageFile]:
    """One deterministic JPEG whose size lies in [min_bytes, max_bytes] when reachable."""
    from PIL import Image

    rng = np.random.default_rng([seed, index])
    photos = source_photos()
    source, photo = photos[int(rng.integers(len(photos)))]
    h, w = photo.shape[:2]
    ch, cw = int(h * rng.uniform(0.45, 1.0)), int(w * rng.uniform(0.45, 1.0))
    top, left = int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1))
    crop = photo[top:top + ch, left:left + cw]
    if rng.random() < 0.5:
        crop = crop[:, ::-1]
    noise = rng.normal(0.0, rng.uniform(1.5, 4.0), size=crop.shape)
    base = Image.fromarray(np.clip(crop + noise, 0, 255).astype(np.uint8))
    quality = int(rng.integers(80, 96))
    target = float(rng.uniform(min_bytes * 1.1, max_bytes * 0.9))
    longest = float(rng.uniform(640, 1024))

    data, size = b"", (0, 0)
    for _ in range(16):
        scale = longest / max(cw, ch)
        size = (max(16, round(cw * scale)), max(16, round(ch * scale)))
        buf = io.BytesIO()
        base.resize(size, Image.BICUBIC).save(buf, format="JPEG", quality=quality)
        data = buf.getvalue()
        if min_bytes <= len(data) <= max_bytes:
            break
        if len(data) < min_bytes and longest >= MAX_SIDE:
            # Smooth, wide crops stay small even at the largest size: spend quality instead.
            quality = min(98, quality + 3)
            continue
        # JPEG size grows roughly with pixel count, i.e. with the square of the side.
        longest = min(MAX_SIDE, max(64.0, longest * (target / len(data)) ** 0.5))
    return data, ImageFile(file_name(seed, index), source, size[0], size[1], quality, len(data))


def generate(out: str | Path, count: int, *, seed: int = 0, min_bytes: int = MIN_BYTES,
             max_bytes: int = MAX_BYTES) -> list[ImageFile]:
    """Write ``count`` JPEGs into ``out`` (kept if already there with the same bytes' size)."""
    directory = Path(out)
    directory.mkdir(parents=True, exist_ok=True)
    files = []
    for index in range(count):
        data, info = make_jpeg(seed, index, min_bytes, max_bytes)
        path = directory / info.name
        if not path.exists() or path.stat().st_size != len(data):
            tmp = path.with_suffix(".tmp")
            tmp.write_bytes(data)
            tmp.replace(path)
        files.append(info)
    return files


def ensure_dataset(root: str | Path, count: int, *, seed: int = 0) -> Path:
    """``<root>/images/`` holding the dataset, generated unless ``<root>/dataset.json`` matches.

    The manifest lives beside the images folder, never in it: every object under the
    input prefix is a benchmark input.
    """
    directory = Path(root) / "images"
    manifest = Path(root) / "dataset.json"
    wanted = {"count": count, "seed": seed, "min_bytes": MIN_BYTES, "max_bytes": MAX_BYTES,
              "generator": GENERATOR_VERSION}
    if manifest.exists():
        meta = json.loads(manifest.read_text())
        if all(meta.get(k) == v for k, v in wanted.items()):
            paths = [directory / f["name"] for f in meta["files"]]
            if all(p.exists() for p in paths) and len(list(directory.iterdir())) == count:
                return directory
    if directory.exists():
        for stale in directory.iterdir():
            stale.unlink()
    files = generate(directory, count, seed=seed)
    manifest.write_text(json.dumps({**wanted, "summary": summarize(files), "files": [f.__dict__ for f in files]}, indent=1))
    return directory


def summarize(files: list[ImageFile]) -> dict:
    sizes = np.array([f.size for f in files])
    return {
        "count": len(files),
        "bytes_min": int(sizes.min()), "bytes_median": int(np.median(sizes)), "bytes_max": int(sizes.max()),
        "in_range": int(((sizes >= MIN_BYTES) & (sizes <= MAX_BYTES)).sum()),
        "sources": sorted({f.source for f in files}),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.common.dataset", description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder to write the JPEGs into")
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    files = generate(args.out, args.count, seed=args.seed)
    print(json.dumps(summarize(files), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
