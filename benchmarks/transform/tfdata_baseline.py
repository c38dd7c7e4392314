"""Contender (b): the pipeline an expert writes by hand with tf.data.

list files -> read -> decode + resize (parallel, AUTOTUNE) -> batch -> prefetch -> the
SavedModel's ``serving_tensor`` signature -> one ``<name>.out`` per file, written by a
background thread so the model never waits on JSON encoding or disk. Decoding uses the
model's own :func:`~benchmarks.common.models.decode_and_resize`, so the arithmetic is the one
``serving_default`` does in-graph and outputs agree with the other contenders. Outputs are
TFS row-format JSON, byte-for-byte the shape the other contenders write.

    python -m benchmarks.transform.tfdata_baseline --model-dir DIR --input DIR --output DIR
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np


def tfs_row_json(probabilities: np.ndarray, klass: int) -> bytes:
    """What TF Serving answers for one instance of a two-output signature (row format)."""
    row = {"classes": int(klass), "probabilities": probabilities.astype(np.float64).tolist()}
    return json.dumps({"predictions": [row]}).encode()


def run(model_dir: str | Path, input_dir: str | Path, output_dir: str | Path, *, batch_size: int = 16) -> dict:
    import tensorflow as tf

    from benchmarks.common.models import SERVING_TENSOR, decode_and_resize

    started = time.monotonic()
    loaded = tf.saved_model.load(str(model_dir))
    predict = loaded.signatures[SERVING_TENSOR]
    size = int(predict.structured_input_signature[1]["images"].shape[1])
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)

    files = tf.data.Dataset.list_files(str(Path(input_dir) / "*"), shuffle=False)
    images = (
        files.map(lambda path: (path, decode_and_resize(tf.io.read_file(path), size)),
                  num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        .batch(batch_size)
        .prefetch(tf.data.AUTOTUNE)
    )

    def write(names: list[bytes], probabilities: np.ndarray, classes: np.ndarray) -> None:
        for name, probs, klass in zip(names, probabilities, classes):
            target = out / (Path(name.decode()).name + ".out")
            target.write_bytes(tfs_row_json(probs, klass))

    count = 0
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="writer") as writer:
        pending = []
        for paths, batch in images:
            result = predict(images=batch)
            pending.append(writer.submit(write, list(paths.numpy()), result["probabilities"].numpy(),
                                         result["classes"].numpy()))
            count += int(batch.shape[0])
        for future in pending:
            future.result()
    return {"images": count, "seconds": time.monotonic() - started}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.transform.tfdata_baseline", description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", required=True, help="SavedModel folder (with serving_tensor)")
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args(argv)
    print(json.dumps(run(args.model_dir, args.input, args.output, batch_size=args.batch_size)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
