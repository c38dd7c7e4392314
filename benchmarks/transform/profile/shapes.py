"""Quick before/after check of the dataflow on shapes the image bench does not cover, one run.

Shapes (tiny model, real JPEGs from :mod:`benchmarks.common.dataset`):

- ``tfrecord``: N JPEGs in 10 TFRecord shards of ``tf.train.Example`` (``image/encoded``),
  SplitType TFRecord, SingleRecord, AssembleWith Line, and an ``inference.py`` that parses the
  Example and base64-wraps the image (seed 004's second job);
- ``csv``: 20 files of CSV lines of 32 floats, SplitType Line, MultiRecord, no script, a
  float-input model;
- ``floatimg``: one JPEG per file, no script, a Keras-style signature taking float images
  (tfbatch decodes and resizes them; tf.data with the model's own ``decode_and_resize``).

For each shape: ``tfbatch transform`` (the CLI, a fresh process) with ``PYTHONPATH`` at each
``--src`` given (e.g. the main checkout's ``src`` = before, a branch's = after), and an expert
tf.data script doing the same job, side by side, whole processes, wall seconds.

    python -m benchmarks.transform.profile.shapes --src before=/work/main/src --src after=src \\
        --shapes tfrecord,csv,floatimg --images 2000 --out benchmarks/transform/profile/shapes.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PARSE_SCRIPT = '''\
import base64
import json

import tensorflow as tf


def input_handler(data, context):
    example = tf.train.Example.FromString(data.read())
    encoded = example.features.feature["image/encoded"].bytes_list.value[0]
    return json.dumps({"instances": [{"b64": base64.b64encode(encoded).decode("utf-8")}]})


def output_handler(response, context):
    if response.status_code != 200:
        raise ValueError(response.content.decode("utf-8"))
    return response.content, context.accept_header
'''

TFDATA_TFRECORD = '''
import json, sys, time
from pathlib import Path
import tensorflow as tf
from benchmarks.common.models import SERVING_TENSOR, decode_and_resize
model, inp, out = sys.argv[1:4]
loaded = tf.saved_model.load(model)
predict = loaded.signatures[SERVING_TENSOR]
size = int(predict.structured_input_signature[1]["images"].shape[1])
Path(out).mkdir(parents=True, exist_ok=True)
spec = {"image/encoded": tf.io.FixedLenFeature([], tf.string)}
for shard in sorted(Path(inp).iterdir()):
    ds = (tf.data.TFRecordDataset(str(shard))
          .map(lambda r: decode_and_resize(tf.io.parse_single_example(r, spec)["image/encoded"], size),
               num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
          .batch(16).prefetch(tf.data.AUTOTUNE))
    lines = []
    for batch in ds:
        r = predict(images=batch)
        for p, c in zip(r["probabilities"].numpy(), r["classes"].numpy()):
            lines.append(json.dumps({"predictions": [{"classes": int(c), "probabilities": p.astype(float).tolist()}]}))
    (Path(out) / (shard.name + ".out")).write_text("\\n".join(lines) + "\\n")
'''

TFDATA_CSV = '''
import json, sys
from pathlib import Path
import tensorflow as tf
model, inp, out = sys.argv[1:4]
predict = tf.saved_model.load(model).signatures["serving_default"]
Path(out).mkdir(parents=True, exist_ok=True)
for f in sorted(Path(inp).iterdir()):
    ds = (tf.data.TextLineDataset(str(f))
          .map(lambda line: tf.io.decode_csv(line, [[0.0]] * 32), num_parallel_calls=tf.data.AUTOTUNE)
          .map(lambda *cols: tf.stack(cols)).batch(1024).prefetch(tf.data.AUTOTUNE))
    lines = []
    for batch in ds:
        (y,) = predict(x=batch).values()
        lines.extend(json.dumps({"predictions": row}) for row in y.numpy().astype(float).tolist())
    (Path(out) / (f.name + ".out")).write_text("\\n".join(lines) + "\\n")
'''


def _tfrecord_inputs(work: Path, images: int) -> tuple[Path, Path, Path, list[str]]:
    import tensorflow as tf

    from benchmarks.common.dataset import ensure_dataset
    from benchmarks.common.models import ensure_artifact, savedmodel_dir
    from tfbatch.artifact import package

    folder = ensure_artifact("tiny", work)
    jpegs = sorted(ensure_dataset(work / "jpegs", images).iterdir())
    shards = work / f"tfrecord-{images}"
    if not shards.exists():
        partial = work / "partial-shards"
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir()
        per = -(-len(jpegs) // 10)
        for n in range(10):
            with tf.io.TFRecordWriter(str(partial / f"shard-{n:02d}.tfrecord")) as writer:
                for path in jpegs[n * per:(n + 1) * per]:
                    feature = {"image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[path.read_bytes()]))}
                    writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
        partial.rename(shards)
    archive = work / "tiny-parse.tar.gz"
    if not archive.exists():
        code = work / "parse-code"
        code.mkdir(exist_ok=True)
        (code / "inference.py").write_text(PARSE_SCRIPT)
        package([savedmodel_dir(folder)], archive, code_dir=code, versions=[1])
    flags = ["--content-type", "application/x-tfexample", "--split-type", "TFRecord",
             "--assemble-with", "Line", "--batch-strategy", "SingleRecord"]
    return archive, shards, savedmodel_dir(folder), flags


def _csv_inputs(work: Path, images: int) -> tuple[Path, Path, Path, list[str]]:
    import numpy as np
    import tensorflow as tf

    from tfbatch.artifact import package

    model = work / "csv-model" / "1"
    if not model.exists():
        module = tf.Module()
        module.w = tf.Variable(np.random.default_rng(0).normal(size=(32, 4)).astype("float32"))

        @tf.function(input_signature=[tf.TensorSpec([None, 32], tf.float32, name="x")])
        def serve(x):
            return {"y": tf.nn.softmax(tf.matmul(x, module.w))}

        tf.saved_model.save(module, str(model), signatures={"serving_default": serve})
    archive = work / "csv-model.tar.gz"
    if not archive.exists():
        package([model], archive, versions=[1])
    data = work / f"csv-{images}"
    if not data.exists():
        rng = np.random.default_rng(1)
        data.mkdir()
        for n in range(20):
            rows = rng.normal(size=(images, 32)).round(4)
            (data / f"part-{n:02d}.csv").write_text("".join(",".join(map(str, r)) + "\n" for r in rows))
    flags = ["--content-type", "text/csv", "--split-type", "Line", "--batch-strategy", "MultiRecord",
             "--max-payload-mb", "1", "--assemble-with", "Line"]
    return archive, data, model, flags


TFDATA_FLOATIMG = '''
import json, sys
from pathlib import Path
import tensorflow as tf
from benchmarks.common.models import decode_and_resize
model, inp, out = sys.argv[1:4]
predict = tf.saved_model.load(model).signatures["serving_default"]
size = int(predict.structured_input_signature[1]["images"].shape[1])
Path(out).mkdir(parents=True, exist_ok=True)
files = sorted(str(p) for p in Path(inp).iterdir())
ds = (tf.data.Dataset.from_tensor_slices(files)
      .map(lambda f: (f, decode_and_resize(tf.io.read_file(f), size)), num_parallel_calls=tf.data.AUTOTUNE)
      .batch(16).prefetch(tf.data.AUTOTUNE))
for names, batch in ds:
    r = predict(images=batch)
    for n, p, c in zip(names.numpy(), r["probabilities"].numpy(), r["classes"].numpy()):
        row = {"classes": int(c), "probabilities": p.astype(float).tolist()}
        (Path(out) / (Path(n.decode()).name + ".out")).write_text(json.dumps({"predictions": [row]}))
'''


def _floatimg_inputs(work: Path, images: int) -> tuple[Path, Path, Path, list[str]]:
    """No script, JPEG files, a Keras-style signature taking float images [None, 32, 32, 3]."""
    import tensorflow as tf

    from benchmarks.common.dataset import ensure_dataset
    from benchmarks.common.models import SERVING_TENSOR, ensure_artifact, savedmodel_dir
    from tfbatch.artifact import package

    folder = ensure_artifact("tiny", work)
    jpegs = ensure_dataset(work / "jpegs", images)
    model = work / "floatimg-model" / "1"
    if not model.exists():
        loaded = tf.saved_model.load(str(savedmodel_dir(folder)))
        tf.saved_model.save(loaded, str(model), signatures={"serving_default": loaded.signatures[SERVING_TENSOR]})
    archive = work / "floatimg-model.tar.gz"
    if not archive.exists():
        package([model], archive, versions=[1])
    return archive, jpegs, model, ["--content-type", "application/x-image"]


def _timed(cmd: list[str], env: dict) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the whole process tree): on a shared VM the CPU figure is
    the steadier one, since the neighbours' load stretches wall time, not our CPU time."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    seconds = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in (0,):
        raise SystemExit(f"{cmd[:4]} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return seconds, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.transform.profile.shapes")
    parser.add_argument("--src", action="append", required=True, help="NAME=PATH of a tfbatch src folder")
    parser.add_argument("--shapes", default="tfrecord,csv")
    parser.add_argument("--images", type=int, default=2000, help="JPEGs (tfrecord) or lines per file (csv)")
    parser.add_argument("--workdir", default=str(Path(tempfile.gettempdir()) / "tfbatch-shapes"))
    parser.add_argument("--out", default="")
    args = parser.parse_args(argv)
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    root = str(Path(__file__).resolve().parents[3])
    results = {"load_average_before": os.getloadavg()[0], "images": args.images, "shapes": {}}
    for shape in args.shapes.split(","):
        archive, inputs, model, flags = {"tfrecord": _tfrecord_inputs, "csv": _csv_inputs,
                                         "floatimg": _floatimg_inputs}[shape](work, args.images)
        wall: dict[str, float] = {}
        cpu: dict[str, float] = {}
        for entry in args.src:
            name, src = entry.split("=", 1)
            env = {**os.environ, "PYTHONPATH": str(Path(src).resolve()) + os.pathsep + root, "TF_CPP_MIN_LOG_LEVEL": "2"}
            out = work / f"out-{shape}-{name}"
            shutil.rmtree(out, ignore_errors=True)
            wall[name], cpu[name] = _timed([sys.executable, "-m", "tfbatch", "transform", "--model", str(archive),
                                            "--input", str(inputs), "--output", str(out), *flags], env)
            print(f"{shape} {name}: {wall[name]:.1f}s wall, {cpu[name]:.1f}s CPU", flush=True)
        script = {"tfrecord": TFDATA_TFRECORD, "csv": TFDATA_CSV, "floatimg": TFDATA_FLOATIMG}[shape]
        out = work / f"out-{shape}-tfdata"
        shutil.rmtree(out, ignore_errors=True)
        env = {**os.environ, "PYTHONPATH": root, "TF_CPP_MIN_LOG_LEVEL": "2"}
        wall["tfdata"], cpu["tfdata"] = _timed([sys.executable, "-c", script, str(model), str(inputs), str(out)], env)
        print(f"{shape} tfdata: {wall['tfdata']:.1f}s wall, {cpu['tfdata']:.1f}s CPU", flush=True)
        # Speed relative to tf.data: its seconds over ours (above 1: faster than tf.data).
        results["shapes"][shape] = {
            "wall_s": wall, "cpu_s": cpu,
            "speed_vs_tfdata_wall": {k: round(wall["tfdata"] / v, 2) for k, v in wall.items() if k != "tfdata"},
            "speed_vs_tfdata_cpu": {k: round(cpu["tfdata"] / v, 2) for k, v in cpu.items() if k != "tfdata"}}
    results["load_average_after"] = os.getloadavg()[0]
    print(json.dumps(results, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
