"""CPU of a script's request JSON round trip: its ``json.dumps`` (tfbatch's look-alike) and
tfbatch's reading of that text into the model's tensor, per request.

    PYTHONPATH=<tree>/src python -m benchmarks.transform.profile.request_json --kind img

Kinds: ``img`` (a 64x64x3 image's floats, ``jpeg-float-script``'s request), ``cifar`` (a
32x32x3 image's integers, ``png-cifar-script``'s), ``csv`` (a 1 MB payload of 4,228 rows of 32
full-precision normal floats, ``csv-script``'s, a few of them below 1e-4 in magnitude). A tree
whose ``jsonenc`` notes the numbers it writes (``written_numbers``) is read through the note,
an older one through ``codec.decode_numeric``. Best of 5 runs of ``--n`` requests, CPU
microseconds of this process per request.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from tfbatch.runtime import jsonenc
from tfbatch.runtime.signature import SignatureInfo, TensorInfo
from tfbatch.tfs import codec


def request(kind: str) -> tuple[dict, SignatureInfo]:
    rs = np.random.RandomState(0)
    if kind == "csv":
        value, shape = rs.normal(size=(4228, 32)).tolist(), (None, 32)
    elif kind == "img":
        value, shape = [(rs.randint(0, 256, (64, 64, 3)).astype(np.float32) / 255.0).tolist()], (None, 64, 64, 3)
    else:
        value, shape = rs.randint(0, 256, (1, 32, 32, 3)).tolist(), (None, 32, 32, 3)
    sig = SignatureInfo("serving_default", "tensorflow/serving/predict",
                        {"x": TensorInfo("x", "x:0", "float32", shape)}, {})
    return {"instances": value}, sig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", choices=["img", "cifar", "csv"], default="img")
    parser.add_argument("--n", type=int, default=0, help="requests per run (default: by kind)")
    args = parser.parse_args()
    obj, sig = request(args.kind)
    n = args.n or {"img": 300, "cifar": 500, "csv": 20}[args.kind]
    noted = getattr(jsonenc, "written_numbers", None)

    def once():
        text = jsonenc.dumps_like_stdlib(obj)
        written = noted(text) if noted else None
        return codec.decode_written(*written, sig) if written else codec.decode_numeric(text.encode(), sig)

    assert once() is not None
    best = float("inf")
    for _ in range(5):
        began = time.process_time()
        for _ in range(n):
            once()
        best = min(best, (time.process_time() - began) / n)
    print(f"{args.kind}: {best * 1e6:.0f} us CPU a request ({'noted' if noted else 'read back'})")


if __name__ == "__main__":
    main()
