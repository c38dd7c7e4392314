"""Time reading a TF Serving body of numbers: the general way (orjson into nested lists, then
``decode_predict``) against ``codec.decode_numeric`` (the text's brackets for the shape, one flat
orjson list for the numbers). Best of 3 rounds, microseconds per body, one thread.

    python -m benchmarks.transform.profile.numeric_bodies
"""

from __future__ import annotations

import json
import timeit

import numpy as np


def main() -> int:
    from tfbatch.runtime.jsonenc import fast_loads
    from tfbatch.runtime.signature import SignatureInfo, TensorInfo
    from tfbatch.tfs.codec import decode_numeric, decode_predict

    def sig(shape):
        return SignatureInfo("serving_default", "tensorflow/serving/predict",
                             {"x": TensorInfo("x", "x:0", "float32", shape)}, {})

    rng = np.random.default_rng(0)
    cases = {
        "seed 002's CIFAR body, 32x32x3 integers": (
            {"instances": rng.integers(0, 256, (1, 32, 32, 3)).tolist()}, sig((None, 32, 32, 3))),
        "a 64x64x3 image as floats": (
            {"instances": (rng.integers(0, 256, (1, 64, 64, 3)) / 255.0).astype(np.float32).tolist()},
            sig((None, 64, 64, 3))),
        "a CSV payload as instances, 5,000 x 32": (
            {"instances": np.round(rng.normal(size=(5000, 32)), 4).tolist()}, sig((None, 32))),
    }
    for name, (value, signature) in cases.items():
        body = json.dumps(value).encode()
        n = 20 if len(body) > 500_000 else 200
        general = min(timeit.repeat(lambda: decode_predict(fast_loads(body), signature), number=n, repeat=3)) / n
        numeric = min(timeit.repeat(lambda: decode_numeric(body, signature), number=n, repeat=3)) / n
        print(f"{name:42} {len(body):>9,} B  general {general * 1e6:8,.0f} us  numeric {numeric * 1e6:8,.0f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
