"""Inputs and models for the job-shape benchmark (:mod:`benchmarks.transform.shapes`), cached.

Everything is made here, deterministically, from the photos that ship in scikit-image and
scikit-learn (:mod:`benchmarks.common.dataset`) and from a seeded random generator:

* ``jpegs``: small JPEGs (18-26 KB, ~22 KB median), one per file;
* ``tfrecord``: the same JPEGs as ``tf.train.Example`` records (``image/encoded``), in 10 shards;
* ``recordio``: the same JPEGs framed as MXNet RecordIO, in 10 files;
* ``csv`` / ``jsonl``: 20 files of rows of 32 floats (CSV, or compact JSON arrays);
* ``pngs``: the JPEGs cut to 32 x 32 and saved as PNG, as CIFAR-10's images are (seed 002).

Models (random weights; same compute as trained ones): the ``tiny`` string-input model of
:mod:`benchmarks.common.models` (decodes JPEG in its graph), ``float64`` (a small Keras CNN
saved with ``tf.saved_model.save(keras_model)``: ``serving_default`` takes float32
``[None, 64, 64, 3]``, the most common export), ``anysize`` (the same layers, fully
convolutional: float32 ``[None, None, None, 3]``, each image at its own size), ``vec32``
(Dense layers on ``[None, 32]``) and ``cifar`` (seed 002's CNN, ``tfbatch.train.models``,
float32 ``[None, 32, 32, 3]``).
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path

from benchmarks.common.dataset import file_name, make_jpeg

JPEG_MIN, JPEG_MAX = 18 * 1024, 26 * 1024
LARGE_MIN, LARGE_MAX = 100 * 1024, 200 * 1024  # the photos of the jpeg-large shape
SHARDS = 10          # TFRecord and RecordIO files
TABLE_FILES = 20     # CSV and JSON Lines files
COLUMNS = 32
RECORDIO_MAGIC = 0xCED7230A

# Seed 004's second job, written anew: parse the Example, base64-wrap its image for TFS REST;
# answer with the TFS JSON minus its whitespace so each record is one line (JSON Lines).
# The output_handler of most SageMaker scripts: the model's answer as it is.
_PASS_THROUGH_OUTPUT = '''def output_handler(response, context):
    if response.status_code != 200:
        raise ValueError(response.content.decode("utf-8"))
    return response.content, context.accept_header
'''

TFRECORD_SCRIPT = '''\
import base64
import json

import tensorflow as tf


def input_handler(data, context):
    example = tf.train.Example()
    example.ParseFromString(data.read())
    image = example.features.feature["image/encoded"].bytes_list.value[0]
    return json.dumps({"instances": [{"b64": base64.b64encode(image).decode("utf-8")}]})


def output_handler(response, context):
    if response.status_code != 200:
        raise ValueError(response.content.decode("utf-8"))
    return json.dumps(json.loads(response.content), separators=(",", ":")), context.accept_header
'''

# A MultiRecord image job: each payload holds whole RecordIO records, framing kept (COMPAT 7).
RECORDIO_MULTI_SCRIPT = '''\
import base64
import json
import struct


def input_handler(data, context):
    body, images, at = data.read(), [], 0
    while at + 8 <= len(body):
        magic, lrec = struct.unpack_from("<II", body, at)
        if magic != 0xCED7230A:
            raise ValueError("byte %d: not a RecordIO record" % at)
        length = lrec & ((1 << 29) - 1)
        images.append({"b64": base64.b64encode(body[at + 8:at + 8 + length]).decode("utf-8")})
        at += 8 + length + (-length % 4)
    return json.dumps({"instances": images})


''' + _PASS_THROUGH_OUTPUT

# A CSV job's usual SageMaker script: the payload's lines to TF Serving's "instances" JSON.
# Its body (the content type checked, the lines read as rows of floats) serves the handler below too.
_CSV_ROWS = '''\
    if context.request_content_type != "text/csv":
        raise ValueError("unsupported content type: " + str(context.request_content_type))
    text = data.read().decode("utf-8")
    rows = [[float(x) for x in line.split(",")] for line in text.splitlines() if line]
'''
CSV_SCRIPT = '''\
import json


def input_handler(data, context):
''' + _CSV_ROWS + '''\
    return json.dumps({"instances": rows})


''' + _PASS_THROUGH_OUTPUT

# The CSV script as a single handler: those rows as "instances" JSON, POSTed to context.rest_uri.
CSV_HANDLER_SCRIPT = '''\
import json

import requests


def handler(data, context):
''' + _CSV_ROWS + '''\
    response = requests.post(context.rest_uri, data=json.dumps({"instances": rows}))
    if response.status_code != 200:
        raise ValueError(response.content.decode("utf-8"))
    return response.content, context.accept_header
'''

# What a SageMaker user with a float-input model must ship: the TFS container cannot take an
# image body for a float tensor, so the script decodes and resizes it (PIL) and sends JSON floats.
FLOAT_IMAGE_SCRIPT = '''\
import io
import json

import numpy as np
from PIL import Image


def input_handler(data, context):
    image = Image.open(io.BytesIO(data.read())).convert("RGB").resize((64, 64), Image.BILINEAR)
    pixels = np.asarray(image, dtype=np.float32) / 255.0
    return json.dumps({"instances": [pixels.tolist()]})


''' + _PASS_THROUGH_OUTPUT


# The same script as some are written: the request names its signature and goes out as bytes.
NAMED_FLOAT_IMAGE_SCRIPT = FLOAT_IMAGE_SCRIPT.replace(
    'return json.dumps({"instances": [pixels.tolist()]})',
    'return json.dumps({"signature_name": "serving_default", "instances": [pixels.tolist()]}).encode("utf-8")')

# Seed 002's script, as its notebook ships it beside the CIFAR-10 CNN: PIL opens the PNG and the
# pixels go to TF Serving as JSON integers (0-255), one image per request; its output_handler
# passes the answer through.
CIFAR_SCRIPT = '''\
import io
import json

import numpy as np
from PIL import Image


def input_handler(data, context):
    if context.request_content_type == "application/x-image":
        image = Image.open(io.BytesIO(data.read()))
        instance = np.expand_dims(image, axis=0)
        return json.dumps({"instances": instance.tolist()})
    raise ValueError("Unsupported content type: " + str(context.request_content_type))


def output_handler(data, context):
    if data.status_code != 200:
        raise ValueError(data.content.decode("utf-8"))
    return data.content, context.accept_header
'''


# The same for a model that takes each image at its own size: no resize, every pixel as JSON.
# A single ``handler`` (SageMaker's other script form): it calls the model itself, a POST to
# context.rest_uri per image, with the same body the bench's pair sends.
HANDLER_SCRIPT = '''\
import base64
import json

import requests


def handler(data, context):
    if context.request_content_type != "application/x-image":
        raise ValueError("unsupported content type {}".format(context.request_content_type))
    body = json.dumps({"instances": [{"b64": base64.b64encode(data.read()).decode("utf-8")}]})
    response = requests.post(context.rest_uri, data=body)
    if response.status_code != 200:
        raise ValueError(response.content.decode("utf-8"))
    return response.content, context.accept_header
'''

# The same handler written to reuse connections, as scripts often are: one requests.Session made
# at import, session.post(...) per image.
SESSION_HANDLER_SCRIPT = HANDLER_SCRIPT.replace(
    "import requests\n\n", "import requests\n\nsession = requests.Session()\n\n").replace(
    "requests.post(context.rest_uri", "session.post(context.rest_uri")

# Seed 003's handler: the model called over gRPC on context.grpc_port, a new channel per image
# with the message limits raised, Predict.future(...).result(), the answer read from float_val.
GRPC_HANDLER_SCRIPT = '''\
import json

import grpc
import numpy as np
from tensorflow.compat.v1 import make_tensor_proto
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

MAX_GRPC_MESSAGE_LENGTH = 512 * 1024 * 1024


def handler(data, context):
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "model"
    request.model_spec.signature_name = "serving_default"
    request.inputs["image_bytes"].CopyFrom(make_tensor_proto([data.read()]))
    options = [("grpc.max_send_message_length", MAX_GRPC_MESSAGE_LENGTH),
               ("grpc.max_receive_message_length", MAX_GRPC_MESSAGE_LENGTH)]
    channel = grpc.insecure_channel("0.0.0.0:{}".format(context.grpc_port), options=options)
    stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    result = stub.Predict.future(request, 30).result()
    probabilities = result.outputs["probabilities"]
    shape = [dim.size for dim in probabilities.tensor_shape.dim]
    classes = np.array(result.outputs["classes"].int64_val).reshape(shape[:1])
    rows = np.array(probabilities.float_val).reshape(shape)
    predictions = [{"classes": int(c), "probabilities": [float(np.float32(v)) for v in row]}
                   for c, row in zip(classes, rows)]
    return json.dumps({"predictions": predictions}), "application/json"
'''

ANYSIZE_IMAGE_SCRIPT = FLOAT_IMAGE_SCRIPT.replace('.convert("RGB").resize((64, 64), Image.BILINEAR)',
                                                  '.convert("RGB")')


def _done(folder: Path, meta: dict) -> bool:
    marker = folder / "done.json"
    return marker.exists() and json.loads(marker.read_text()) == meta


def _fresh(folder: Path) -> Path:
    if folder.exists():
        shutil.rmtree(folder)
    (folder / "input").mkdir(parents=True)
    return folder / "input"


def jpegs(workdir: Path, count: int, seed: int = 0, *, large: bool = False) -> Path:
    """``count`` ~22 KB JPEGs, one per file; returns the input folder. ``large``: 100-200 KB
    photos instead (640-2,048 pixels on the long side, what a camera or Open Images gives)."""
    low, high = (LARGE_MIN, LARGE_MAX) if large else (JPEG_MIN, JPEG_MAX)
    folder = workdir / f"jpegs-{'large-' if large else ''}{count}-{seed}"
    meta = {"count": count, "seed": seed, "min": low, "max": high}
    # BENCH_DISTINCT_JPEGS=N (a lease's time): only N images are made; image i >= N is a copy of
    # image i % N under its own name. Decode and model cost the same; making 50,000 took 130 s
    # of a 16-core lease.
    distinct = min(count, int(os.environ.get("BENCH_DISTINCT_JPEGS") or count))
    if distinct < count:
        meta["distinct"] = distinct
    if not _done(folder, meta):
        target = _fresh(folder)
        # Each image depends on (seed, index) alone, so index ranges can be made in parallel:
        # 10,000 took ~170 s on one core of the 16-core device machine.
        workers = min(os.cpu_count() or 1, -(-distinct // 250))
        chunks = [(str(target), seed, start, min(distinct, start + 250), low, high)
                  for start in range(0, distinct, 250)]
        if workers > 1:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
                list(pool.map(_write_jpegs, chunks))
        else:
            for chunk in chunks:
                _write_jpegs(chunk)
        for index in range(distinct, count):
            (target / file_name(seed, index)).write_bytes((target / file_name(seed, index % distinct)).read_bytes())
        (folder / "done.json").write_text(json.dumps(meta))
    return folder / "input"


def _write_jpegs(chunk: tuple[str, int, int, int, int, int]) -> None:
    target, seed, start, stop, low, high = chunk
    for index in range(start, stop):
        data, info = make_jpeg(seed, index, low, high)
        (Path(target) / info.name).write_bytes(data)


def _split(items: list, parts: int) -> list[list]:
    size = -(-len(items) // parts)
    return [items[i:i + size] for i in range(0, len(items), size)]


def recordio_frame(data: bytes) -> bytes:
    """One whole RecordIO record (cflag 0). Data holding the magic at a 4-byte-aligned offset
    would need MXNet's split records; the builder skips such images instead (ValueError)."""
    magic = struct.pack("<I", RECORDIO_MAGIC)
    for at in range(0, len(data) - 3, 4):
        if data[at:at + 4] == magic:
            raise ValueError("payload contains the RecordIO magic at an aligned offset")
    return struct.pack("<II", RECORDIO_MAGIC, len(data)) + data + b"\0" * (-len(data) % 4)


def framed(workdir: Path, kind: str, count: int, seed: int = 0) -> Path:
    """The JPEGs of :func:`jpegs` as ``kind`` ("tfrecord" or "recordio") shards."""
    folder = workdir / f"{kind}-{count}-{seed}"
    meta = {"count": count, "seed": seed, "shards": SHARDS, "kind": kind}
    if _done(folder, meta):
        return folder / "input"
    write_shards(sorted(jpegs(workdir, count, seed).iterdir()), _fresh(folder), kind)
    (folder / "done.json").write_text(json.dumps(meta))
    return folder / "input"


def write_shards(images: list[Path], target: Path, kind: str, *, bare: bytes | None = None) -> None:
    """``images`` as SHARDS ``kind`` ("tfrecord" or "recordio") files under ``target``: each
    TFRecord record a ``tf.train.Example`` (``image/encoded``, ``image/filename``), each
    RecordIO record the image's bytes. A TFRecord image whose bytes equal ``bare`` is written as
    they are, not in an Example (a record that does not parse)."""
    for n, shard in enumerate(_split(images, SHARDS)):
        path = target / f"part-{n:05d}.{kind}"
        if kind == "tfrecord":
            import tensorflow as tf

            with tf.io.TFRecordWriter(str(path)) as writer:
                for image in shard:
                    if bare is not None and image.read_bytes() == bare:
                        writer.write(bare)
                        continue
                    feature = {"image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[image.read_bytes()])),
                               "image/filename": tf.train.Feature(bytes_list=tf.train.BytesList(value=[image.name.encode()]))}
                    writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
        else:
            with open(path, "wb") as out:
                for image in shard:
                    try:
                        out.write(recordio_frame(image.read_bytes()))
                    except ValueError:
                        continue


def json_images(workdir: Path, count: int, seed: int = 0) -> Path:
    """The JPEGs of :func:`jpegs` as TF Serving request bodies, one per file:
    ``{"instances": [64 x 64 x 3 floats in [0, 1], 4 decimals]}`` (PIL's bilinear resize),
    what a client of the float model sends with the SageMaker SDK's JSONSerializer."""
    import numpy as np
    import orjson
    from PIL import Image

    folder = workdir / f"json-images-{count}-{seed}"
    meta = {"count": count, "seed": seed, "size": 64, "decimals": 4}
    if _done(folder, meta):
        return folder / "input"
    images = sorted(jpegs(workdir, count, seed).iterdir())
    target = _fresh(folder)
    for image in images:
        with Image.open(image) as im:
            pixels = np.asarray(im.convert("RGB").resize((64, 64), Image.BILINEAR), dtype=np.float64)
        body = orjson.dumps({"instances": [np.round(pixels / 255.0, 4).tolist()]})
        (target / (image.stem + ".json")).write_bytes(body)
    (folder / "done.json").write_text(json.dumps(meta))
    return folder / "input"


def pngs(workdir: Path, count: int, seed: int = 0) -> Path:
    """The JPEGs of :func:`jpegs` cut to 32 x 32 (PIL's bilinear resize) and saved as RGB PNGs,
    named ``<n>_<label>.png`` as seed 002's CIFAR-10 images are (~3 KB each)."""
    from PIL import Image

    folder = workdir / f"pngs-{count}-{seed}"
    meta = {"count": count, "seed": seed, "size": 32}
    if _done(folder, meta):
        return folder / "input"
    images = sorted(jpegs(workdir, count, seed).iterdir())
    target = _fresh(folder)
    labels = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
    for n, image in enumerate(images):
        with Image.open(image) as im:
            im.convert("RGB").resize((32, 32), Image.BILINEAR).save(target / f"{n:06d}_{labels[n % 10]}.png")
    (folder / "done.json").write_text(json.dumps(meta))
    return folder / "input"


def table(workdir: Path, kind: str, rows_per_file: int, seed: int = 0) -> Path:
    """``TABLE_FILES`` files of ``rows_per_file`` rows of 32 floats, as "csv" or "jsonl"; "csv-id"
    and "jsonl-id" put an id first (``r<file>-<row>``: a CSV column, or ``{"id": ..., "features":
    [...]}``), the input of the SageMaker guide's InputFilter / JoinSource / OutputFilter job."""
    import numpy as np

    folder = workdir / f"{kind}-{rows_per_file}-{seed}"
    meta = {"rows": rows_per_file, "seed": seed, "files": TABLE_FILES, "kind": kind}
    if _done(folder, meta):
        return folder / "input"
    target = _fresh(folder)
    rng = np.random.default_rng(seed)
    for n in range(TABLE_FILES):
        values = np.round(rng.normal(size=(rows_per_file, COLUMNS)), 4)
        if kind == "csv":
            lines = (",".join(f"{v:g}" for v in row) for row in values)
        elif kind == "csv-id":
            lines = (f"r{n}-{i}," + ",".join(f"{v:g}" for v in row) for i, row in enumerate(values))
        elif kind == "jsonl-id":
            lines = (f'{{"id":"r{n}-{i}","features":[' + ",".join(f"{v:g}" for v in row) + "]}"
                     for i, row in enumerate(values))
        else:
            lines = ("[" + ",".join(f"{v:g}" for v in row) + "]" for row in values)
        (target / f"part-{n:05d}.{kind.removesuffix('-id')}").write_text("\n".join(lines) + "\n")
    (folder / "done.json").write_text(json.dumps(meta))
    return folder / "input"


def _keras_model(name: str):
    import keras

    keras.utils.set_random_seed(7)
    if name == "cifar":
        from tfbatch.train.models import build_cifar_cnn

        return build_cifar_cnn((32, 32, 3), 10)
    if name in ("float64", "anysize"):
        inputs = keras.Input((64, 64, 3) if name == "float64" else (None, None, 3))
        x = keras.layers.Conv2D(8, 3, strides=2, activation="relu")(inputs)
        x = keras.layers.Conv2D(16, 3, strides=2, activation="relu")(x)
        x = keras.layers.GlobalAveragePooling2D()(x)
    else:
        inputs = keras.Input((COLUMNS,))
        x = keras.layers.Dense(64, activation="relu")(inputs)
    return keras.Model(inputs, keras.layers.Dense(10, activation="softmax")(x))


def keras_artifact(name: str, workdir: Path, script: str | None = None) -> Path:
    """``<workdir>/models/<name>/`` with ``savedmodel/1``, ``model-noscript.tar.gz`` and, given
    a script, ``model.tar.gz`` carrying it as ``code/inference.py``. Built once."""
    import tensorflow as tf

    from tfbatch.artifact import package

    folder = workdir / "models" / name
    if (folder / "meta.json").exists():
        return folder
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    savedmodel = folder / "savedmodel" / "1"
    tf.saved_model.save(_keras_model(name), str(savedmodel))
    package([savedmodel], folder / "model-noscript.tar.gz", versions=[1])
    if script:
        code = folder / "code"
        code.mkdir()
        (code / "inference.py").write_text(script)
        package([savedmodel], folder / "model.tar.gz", code_dir=code, versions=[1])
    (folder / "meta.json").write_text(json.dumps({"name": name}))
    return folder


def scripted_archive(folder: Path, name: str, script: str) -> Path:
    """``<folder>/<name>.tar.gz``: the folder's SavedModel with ``script`` as its inference.py."""
    from tfbatch.artifact import package

    target = folder / f"{name}.tar.gz"
    if not target.exists():
        code = folder / f"code-{name}"
        code.mkdir(exist_ok=True)
        (code / "inference.py").write_text(script)
        partial = folder / f"partial-{name}.tar.gz"
        package([folder / "savedmodel" / "1"], partial, code_dir=code, versions=[1])
        os.replace(partial, target)
    return target
