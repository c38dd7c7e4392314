"""What a float script's ``json.dumps`` costs per image: ``dumps_like_stdlib`` and its noted array
(``numbers_array``) on one 64 x 64 x 3 image's ``tolist()``, and, with ``--loop DIR``, the bench's
``FLOAT_IMAGE_SCRIPT`` body over real JPEGs with the handler worker's collector settings.

    python -m benchmarks.transform.profile.script_json_cost [--loop jpegs-5000-0/input] [--images 1500]

Run it with each tree's ``src`` first on ``PYTHONPATH`` to compare two trees
(float-script-json.md).
"""

from __future__ import annotations

import argparse
import gc
import io
import time
import timeit
from pathlib import Path

import numpy as np

from tfbatch.handlers.pool_worker import WORKER_GC_THRESHOLDS
from tfbatch.runtime import jsonenc


def _best(call, number: int = 300, repeat: int = 5) -> float:
    call()
    return min(timeit.repeat(call, number=number, repeat=repeat)) / number * 1e6


def isolated() -> None:
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, (64, 64, 3)).astype(np.float32) / 255.0
    floats, ints = pixels.tolist(), (pixels * 255).astype(int).tolist()
    for name, call in (("dumps_like_stdlib, floats", lambda: jsonenc.dumps_like_stdlib({"instances": [floats]})),
                       ("numbers_array, floats", lambda: jsonenc.numbers_array([floats], np.float64)),
                       ("dumps_like_stdlib, integers", lambda: jsonenc.dumps_like_stdlib({"instances": [ints]})),
                       ("numbers_array, integers", lambda: jsonenc.numbers_array([ints], np.int64))):
        print(f"{name:32s} {_best(call):8.1f} us")


def loop(folder: Path, images: int) -> None:
    from PIL import Image

    bodies = [p.read_bytes() for p in sorted(folder.iterdir())[:images]]
    gc.freeze()
    gc.set_threshold(*WORKER_GC_THRESHOLDS)
    spent = dict.fromkeys(("PIL", "asarray / 255", "tolist", "dumps_like_stdlib"), 0.0)
    for body in bodies:
        t0 = time.perf_counter()
        image = Image.open(io.BytesIO(body)).convert("RGB").resize((64, 64), Image.BILINEAR)
        t1 = time.perf_counter()
        pixels = np.asarray(image, dtype=np.float32) / 255.0
        t2 = time.perf_counter()
        rows = pixels.tolist()
        t3 = time.perf_counter()
        text = jsonenc.dumps_like_stdlib({"instances": [rows]})
        t4 = time.perf_counter()
        jsonenc.written_numbers(text)  # taken, as the worker takes it
        for key, took in zip(spent, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
            spent[key] += took
    for key, took in spent.items():
        print(f"{key:32s} {took / len(bodies) * 1e3:8.3f} ms an image")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loop", type=Path, help="a folder of JPEGs: run the script's body over them")
    parser.add_argument("--images", type=int, default=1500)
    args = parser.parse_args()
    isolated()
    if args.loop:
        loop(args.loop, args.images)


if __name__ == "__main__":
    main()
