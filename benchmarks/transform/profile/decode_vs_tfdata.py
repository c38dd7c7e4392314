"""CPU an image of tfbatch's image decoder against the decode an expert's tf.data script runs,
both alone (no model, no writes): JPEG files to float32 [64, 64, 3] in batches of 32.

    python -m benchmarks.transform.profile.decode_vs_tfdata --input FOLDER [--images 3000] [--rounds 2]

Contenders, alternated each round:
- ``tfbatch``: ``records.imagedecode.ImageDecoder`` on the bodies (read beforehand), as the
  dataflow calls it;
- ``tfdata``: ``read_file -> decode_jpeg -> resize(bilinear, antialias) -> / 255`` in
  ``map(AUTOTUNE)``, then ``batch`` and ``prefetch`` (``shape_tfdata --float``'s decode);
- ``tfdata-levels``: the same with tfbatch's rule (libjpeg's accurate DCT, rounded to 8-bit levels).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", required=True)
    parser.add_argument("--images", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from tfbatch.records.imagedecode import ImageDecoder, ImageTarget
    from tfbatch.runtime.tf_import import import_tensorflow

    tf = import_tensorflow()
    files = sorted(str(p) for p in Path(args.input).iterdir() if p.is_file())[:args.images]
    bodies = [Path(f).read_bytes() for f in files]
    decoder = ImageDecoder(ImageTarget(64, 64, 3, "float32"))
    decoder.prepare().join()

    def tfbatch() -> None:
        for start in range(0, len(bodies), 32):
            decoder.decode(bodies[start:start + 32])

    def tfdata(levels: bool) -> None:
        def one(path):
            data = tf.io.read_file(path)
            if levels:
                image = tf.io.decode_jpeg(data, channels=3, dct_method="INTEGER_ACCURATE")
                out = tf.image.resize(image, (64, 64), method="bilinear", antialias=True)
                return tf.cast(tf.clip_by_value(tf.floor(out + 0.5), 0.0, 255.0), tf.uint8)
            image = tf.io.decode_jpeg(data, channels=3)
            return tf.image.resize(image, (64, 64), method="bilinear", antialias=True) / 255.0

        dataset = (tf.data.Dataset.from_tensor_slices(files).map(one, num_parallel_calls=tf.data.AUTOTUNE)
                   .batch(32).prefetch(2))
        for batch in dataset:
            batch.numpy()

    contenders = {"tfbatch": tfbatch, "tfdata": lambda: tfdata(False), "tfdata-levels": lambda: tfdata(True)}
    for _ in range(args.rounds):
        for name, run in contenders.items():
            cpu, wall = time.process_time(), time.perf_counter()
            run()
            print(f"{name}: CPU {(time.process_time() - cpu) / len(files) * 1e3:.3f} ms/image, "
                  f"wall {(time.perf_counter() - wall) / len(files) * 1e3:.3f} ms/image")


if __name__ == "__main__":
    main()
