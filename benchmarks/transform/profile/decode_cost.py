"""CPU per image of tfbatch's image decoder against the tf.data map an expert writes, same ops.

Both decode, resize to 64 x 64 (bilinear, antialiased) and scale to [0, 1]; tf.data's map runs
with one parallel call and a private pool of one thread, tfbatch's decoder with one shard, so
the figures are per image on one core. Also the bare eager decode, for the share the resize
and the machinery take.

    python -m benchmarks.transform.profile.decode_cost DIR [COUNT]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    import tensorflow as tf

    from tfbatch.records.imagedecode import ImageDecoder, ImageTarget

    args = argv if argv is not None else sys.argv[1:]
    files = sorted(p for p in Path(args[0]).iterdir() if p.is_file())[: int(args[1]) if len(args) > 1 else 200]
    bodies = [p.read_bytes() for p in files]
    png = files[0].suffix == ".png"
    cpu = time.process_time
    decoder = ImageDecoder(ImageTarget(64, 64, 3, "float32"), workers=1)
    decoder.decode(bodies[:4])
    for _ in range(2):
        began = cpu()
        for k in range(0, len(bodies), 64):
            decoder.decode(bodies[k:k + 64])
        print(f"tfbatch decoder           {(cpu() - began) / len(bodies) * 1e3:.2f} ms CPU per image")
        for dct in ("", "INTEGER_ACCURATE"):
            def decode(data, dct=dct):
                image = tf.io.decode_png(data, channels=3) if png else tf.io.decode_jpeg(data, channels=3, dct_method=dct)
                image = tf.image.resize(image, (64, 64), method="bilinear", antialias=True)
                return tf.ensure_shape(image / 255.0, (64, 64, 3))
            options = tf.data.Options()
            options.threading.private_threadpool_size = 1
            dataset = tf.data.Dataset.from_tensor_slices(bodies).map(decode, num_parallel_calls=1).batch(64)
            dataset = dataset.with_options(options)
            for _ in dataset.take(1):
                pass
            began = cpu()
            for _ in dataset:
                pass
            print(f"tf.data dct_method={dct or 'default':16} {(cpu() - began) / len(bodies) * 1e3:.2f} ms CPU per image")
        began = cpu()
        for body in bodies[:100]:
            tf.io.decode_png(body, channels=3) if png else tf.io.decode_jpeg(body, channels=3)
        print(f"eager decode alone        {(cpu() - began) / min(100, len(bodies)) * 1e3:.2f} ms CPU per image")
    return 0


if __name__ == "__main__":
    sys.exit(main())
