"""TensorFlow's two bilinear kernels on growing images: CPU an image, and how far their levels are.

    python -m benchmarks.transform.profile.resize_kernels [--rounds 50]

The antialiased kernel (``ScaleAndTranslate``) and the plain one (``ResizeBilinear``) on a batch
of 64 random 32 x 32 images grown to 64 x 64, CPU an image; then, on random images of several
growing sizes, the largest float difference and the pixels whose rounded level differs
(``records/imagedecode.py::_resample`` takes the plain kernel when an image only grows).
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=50)
    args = parser.parse_args()
    from tfbatch.runtime.tf_import import import_tensorflow

    tf = import_tensorflow()
    rng = np.random.default_rng(0)
    batch = tf.constant(rng.integers(0, 256, (64, 32, 32, 3), dtype=np.uint8))
    for antialias in (True, False):
        fn = tf.function(lambda x, a=antialias: tf.image.resize(x, [64, 64], method="bilinear", antialias=a),
                         autograph=False)
        fn(batch)
        started = time.process_time()
        for _ in range(args.rounds):
            fn(batch).numpy()
        per = (time.process_time() - started) / args.rounds / 64 * 1e3
        print(f"antialias={antialias}: {per:.3f} ms of CPU an image (32x32 -> 64x64)")

    def levels(x):
        return np.clip(np.floor(x + 0.5), 0, 255).astype(np.int32)

    for h, w, H, W in [(32, 32, 64, 64), (17, 23, 64, 64), (32, 32, 224, 224), (64, 48, 64, 96),
                       (10, 10, 11, 13), (1, 1, 64, 64)]:
        x = tf.constant(rng.integers(0, 256, (4, h, w, 3), dtype=np.uint8))
        a = tf.image.resize(x, [H, W], method="bilinear", antialias=True).numpy()
        b = tf.image.resize(x, [H, W], method="bilinear", antialias=False).numpy()
        differ = int((levels(a) != levels(b)).sum())
        print(f"{h}x{w} -> {H}x{W}: max float difference {np.abs(a - b).max():.2g}, "
              f"{differ} of {a.size} levels differ")


if __name__ == "__main__":
    main()
