"""CPU and wall per image of ``ImageDecoder.decode`` on batches of 64 JPEGs, by thread count:
what cutting a batch into more shards (one TensorFlow call each) costs.

    python -m benchmarks.transform.profile.decode_shards JPEG_FOLDER --workers 2,4,16,2,16 [--images 2048]

``--min-shard 1`` (the default here) lets each worker count give its own shard count, as the
decoder did before ``MIN_SHARD_IMAGES``; two timed passes per entry, after one warm-up batch.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder")
    parser.add_argument("--workers", default="2,4,16")
    parser.add_argument("--images", type=int, default=2048)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--min-shard", type=int, default=1)
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from tfbatch.records.imagedecode import ImageDecoder, ImageTarget

    bodies = [f.read_bytes() for f in sorted(Path(args.folder).iterdir())[:args.images]]
    target = ImageTarget(64, 64, 3, "float32")
    for workers in (int(w) for w in args.workers.split(",")):
        decoder = ImageDecoder(target, workers=workers, min_shard=args.min_shard)
        decoder.decode(bodies[:args.batch])
        for _ in range(2):
            cpu, wall = time.process_time(), time.perf_counter()
            for k in range(0, len(bodies), args.batch):
                decoder.decode(bodies[k:k + args.batch])
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            print(f"workers {workers}: cpu {cpu / len(bodies) * 1e3:.3f} ms/image, wall {wall / len(bodies) * 1e3:.3f} ms/image")


if __name__ == "__main__":
    main()
