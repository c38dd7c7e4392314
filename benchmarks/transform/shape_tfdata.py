"""Contender (b) for every job shape: the tf.data script an expert writes for that exact job.

Same inputs, same model, same rows per output object as the transform job, written as fast
as tf.data allows: parallel reads (``interleave`` over files with ``num_parallel_calls``),
decoding in ``map(num_parallel_calls=AUTOTUNE)`` off the GIL, ``batch``, ``prefetch``, the
model's signature, and a background writer thread so the model never waits on JSON or disk.

* ``files``: one JPEG per file -> ``list_files -> read + decode -> batch -> prefetch``; the
  string-input model's ``serving_tensor`` with the model's own decode, or (``--float``) a
  float-input model's ``serving_default`` fed ``decode_jpeg`` (``decode_png`` for ``.png`` files)
  ``-> resize(bilinear, antialias) -> /255``; a model that takes any size (``[None, None, None, 3]``) gets ``decode_jpeg -> /255``
  in batches of one (``--batch-size 1``: sizes differ). One TFS row-format answer per file.
* ``records``: files of records (``tfrecord``: ``tf.train.Example`` with ``image/encoded``;
  ``recordio``: MXNet framing, split with a few lines of Python per file) -> one line per
  record. Batches are formed inside each file's branch, so an object ends with its own batch
  and is written as soon as its last batch is back.
* ``json``: one TF Serving JSON body per file (``{"instances": [image]}``) -> ``read_file ->
  numpy_function(orjson.loads -> float32) -> batch -> prefetch`` (JSON has no TensorFlow op;
  the parse holds the GIL, as any Python parser does) -> one TFS row-format answer per file.
* ``table``: CSV or compact JSON-array lines of 32 floats -> ``TextLineDataset -> batch ->
  decode_csv`` (brackets stripped for JSON) -> one ``{"predictions": [...]}`` line per batch;
  with ``--join`` (JoinSource=Input) each input line is kept beside its row and written back
  with its prediction: ``line,p0,p1,...`` for CSV, ``{"SageMakerInput":line,"SageMakerOutput":
  {"predictions":[row]}}`` for JSON Lines, the line's bytes spliced in as they are. Framings
  ``csv-id`` (an id column, then the features) and ``jsonl-id`` (``{"id": ..., "features":
  [...]}``, parsed by orjson in a ``numpy_function``) keep only the id: ``id,p0,...`` and
  ``{"id":...,"SageMakerOutput":{"predictions":[row]}}``, what the SageMaker guide's InputFilter
  / JoinSource / OutputFilter job writes.

    python -m benchmarks.transform.shape_tfdata --kind files --model-dir DIR --input DIR --output DIR
"""

from __future__ import annotations

import argparse
import json
import shutil
import struct
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

CYCLE = 4  # files read at once per pipeline: enough to keep 2 cores busy, little memory


def _dumps(value) -> bytes:
    import orjson

    return orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY)


def _rows(result: dict, float_model: bool) -> list:
    """TFS row format for a batch: row objects for two outputs, plain lists for one."""
    if float_model or len(result) == 1:
        (values,) = result.values()
        return list(values.numpy().astype(np.float64))
    probs, classes = result["probabilities"].numpy().astype(np.float64), result["classes"].numpy()
    return [{"classes": int(k), "probabilities": p} for k, p in zip(classes, probs)]


def _signature(model_dir: str, float_model: bool):
    import tensorflow as tf

    from benchmarks.common.models import SERVING_TENSOR

    loaded = tf.saved_model.load(model_dir)
    predict = loaded.signatures["serving_default" if float_model else SERVING_TENSOR]
    (key, spec), = predict.structured_input_signature[1].items()
    return loaded, predict, key, spec


def _image_decoder(spec, float_model: bool, raw: bool = False, png: bool = False):
    import tensorflow as tf

    from benchmarks.common.models import decode_and_resize

    if raw:  # the pixels as they are (0-255), at the model's size: what the CIFAR-10 script sends
        shape = (int(spec.shape[1]), int(spec.shape[2]), 3)
        return lambda data: tf.ensure_shape(tf.cast(tf.io.decode_image(data, channels=3, expand_animations=False),
                                                    tf.float32), shape)
    if spec.shape[1] is None:  # each image at its own size (batches of one)
        return lambda data: tf.cast(tf.io.decode_jpeg(data, channels=3), tf.float32) / 255.0
    size = int(spec.shape[1])
    if not float_model:
        return lambda data: decode_and_resize(data, size)

    def decode(data):
        image = (tf.io.decode_png if png else tf.io.decode_jpeg)(data, channels=3)
        image = tf.image.resize(image, (size, size), method="bilinear", antialias=True)
        return tf.ensure_shape(image / 255.0, (size, size, 3))
    return decode


def _json_decoder(spec):
    import orjson
    import tensorflow as tf

    shape = spec.shape[1:]

    def parse(body: bytes) -> np.ndarray:
        return np.asarray(orjson.loads(body)["instances"][0], dtype=np.float32)

    return lambda data: tf.ensure_shape(tf.numpy_function(parse, [data], tf.float32, stateful=False), shape)


def _split_recordio(data: bytes) -> np.ndarray:
    records, at = [], 0
    while at + 8 <= len(data):
        _, lrec = struct.unpack_from("<II", data, at)
        length = lrec & ((1 << 29) - 1)
        records.append(data[at + 8:at + 8 + length])
        at += 8 + length + (-length % 4)
    return np.array(records, dtype=object)


def run(kind: str, model_dir: str, input_dir: str, output_dir: str, *, batch_size: int, float_model: bool,
        framing: str = "", join: bool = False, raw: bool = False) -> dict:
    import tensorflow as tf

    started = time.monotonic()
    join = join or framing.endswith("-id")  # an id is only kept to be written back
    _, predict, key, spec = _signature(model_dir, float_model or kind in ("table", "json"))
    from benchmarks.transform.s3_inputs import Outputs

    outputs = Outputs(output_dir)  # files, or for s3:// each output PUT from upload threads
    remote = input_dir.startswith("s3://")
    if remote:
        from benchmarks.transform.s3_inputs import list_keys

        files = list_keys(input_dir)
    else:
        files = sorted(str(p) for p in Path(input_dir).iterdir() if p.is_file())
    auto = tf.data.AUTOTUNE
    count = 0
    scratch = None  # s3:// shards and tables: where their objects are downloaded

    def emit(name: bytes, data: bytes) -> None:
        """One object's output, named after its input."""
        outputs.write(Path(name.decode()).name + ".out", data)

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="writer") as writer:
        pending = []
        if kind in ("files", "json"):
            png = bool(files) and files[0].endswith(".png")
            decode = _image_decoder(spec, float_model, raw, png) if kind == "files" else _json_decoder(spec)
            if remote:  # boto3 threads fetch in order, a bounded window ahead (s3_inputs.py)
                from benchmarks.transform.s3_inputs import read_in_order

                string = tf.TensorSpec((), tf.string)
                images = (tf.data.Dataset.from_generator(lambda: read_in_order(input_dir, files),
                                                         output_signature=(string, string))
                          .map(lambda p, data: (p, decode(data)), num_parallel_calls=auto, deterministic=True))
            else:
                images = tf.data.Dataset.from_tensor_slices(files).map(
                    lambda p: (p, decode(tf.io.read_file(p))), num_parallel_calls=auto, deterministic=True)
            images = images.batch(batch_size).prefetch(auto)

            def write_files(names, rows):
                for name, row in zip(names, rows):
                    emit(name, _dumps({"predictions": [row]}))

            for names, batch in images:
                rows = _rows(predict(**{key: batch}), float_model or kind == "json")
                pending.append(writer.submit(write_files, list(names.numpy()), rows))
                count += len(rows)
        else:
            if kind == "records":
                decode = _image_decoder(spec, False)
                if framing == "tfrecord":
                    features = {"image/encoded": tf.io.FixedLenFeature([], tf.string)}

                    def records(path):
                        return (tf.data.TFRecordDataset(path)
                                .map(lambda r: decode(tf.io.parse_single_example(r, features)["image/encoded"]),
                                     num_parallel_calls=auto).batch(batch_size))
                else:
                    def records(path):
                        split = tf.numpy_function(_split_recordio, [tf.io.read_file(path)], tf.string, stateful=False)
                        return (tf.data.Dataset.from_tensor_slices(split).map(decode, num_parallel_calls=auto)
                                .batch(batch_size))
                empty = tf.zeros([0, *spec.shape[1:]], tf.float32)
            else:
                decode_table = _table_decoder(framing)

                def records(path):
                    lines = tf.data.TextLineDataset(path).filter(lambda s: tf.strings.length(s) > 0).batch(batch_size)
                    if framing.endswith("-id"):  # (ids, features)
                        return lines.map(decode_table, num_parallel_calls=auto)
                    if join:  # the lines travel with their rows, to be written back beside them
                        return lines.map(lambda b: (b, decode_table(b)), num_parallel_calls=auto)
                    return lines.map(decode_table, num_parallel_calls=auto)
                empty = tf.zeros([0, int(spec.shape[1])], tf.float32)
            no_lines = tf.zeros([0], tf.string)

            def branch(path):
                end = tf.data.Dataset.from_tensors((path, no_lines, empty, True))
                if join:
                    return records(path).map(lambda lines, x: (path, lines, x, False)).concatenate(end)
                return records(path).map(lambda x: (path, no_lines, x, False)).concatenate(end)

            if remote:  # each object downloaded to a scratch file, a few ahead (s3_inputs.py)
                from benchmarks.transform.s3_inputs import fetched_files

                scratch = tempfile.mkdtemp(prefix="shape-tfdata-s3-")
                paths = tf.data.Dataset.from_generator(lambda: fetched_files(input_dir, files, scratch),
                                                       output_signature=tf.TensorSpec((), tf.string))
            else:
                paths = tf.data.Dataset.from_tensor_slices(files)
            batches = (paths
                       .interleave(branch, cycle_length=CYCLE, num_parallel_calls=auto, deterministic=True)
                       .prefetch(auto))
            per_file: dict[bytes, list[bytes]] = {}

            def collect(name, inputs, rows, last):
                lines = per_file.setdefault(name, [])
                if join:
                    lines += [_joined(line, row, framing) for line, row in zip(inputs, rows)]
                elif kind == "table" and rows:
                    lines.append(_dumps({"predictions": rows}))
                else:
                    lines += [_dumps({"predictions": [row]}) for row in rows]
                if last:
                    emit(name, b"".join(line + b"\n" for line in per_file.pop(name)))

            for path, inputs, batch, last in batches:
                rows = [] if bool(last) else _rows(predict(**{key: batch}), kind == "table")
                pending.append(writer.submit(collect, path.numpy(), list(inputs.numpy()) if join else (),
                                             rows, bool(last)))
                count += len(rows)
        for future in pending:
            future.result()
    outputs.close()
    if scratch is not None:
        shutil.rmtree(scratch, ignore_errors=True)
    return {"records": count, "seconds": time.monotonic() - started}


def _joined(line: bytes, row, framing: str) -> bytes:
    """JoinSource=Input for one line: the prediction appended (CSV) or wrapped beside it (JSON);
    for the ``-id`` framings ``line`` is the record's id."""
    if framing in ("csv", "csv-id"):
        return line + b"," + _dumps(row)[1:-1]
    if framing == "jsonl-id":
        return b'{"id":' + _dumps(line.decode()) + b',"SageMakerOutput":{"predictions":[' + _dumps(row) + b"]}}"
    return b'{"SageMakerInput":' + line + b',"SageMakerOutput":{"predictions":[' + _dumps(row) + b"]}}"


def _table_decoder(framing: str):
    import tensorflow as tf

    from benchmarks.transform.shape_data import COLUMNS

    if framing == "csv-id":
        def decode_ids(lines):
            cells = tf.io.decode_csv(lines, [[""]] + [[0.0]] * COLUMNS)
            return cells[0], tf.stack(cells[1:], axis=1)
        return decode_ids
    if framing == "jsonl-id":
        import orjson

        def parse(lines):
            objects = [orjson.loads(line) for line in lines]
            return (np.array([o["id"].encode() for o in objects], dtype=object),
                    np.array([o["features"] for o in objects], dtype=np.float32))

        def decode_json(lines):
            ids, features = tf.numpy_function(parse, [lines], (tf.string, tf.float32), stateful=False)
            return ids, tf.ensure_shape(features, [None, COLUMNS])
        return decode_json

    def decode(lines):
        if framing == "jsonl":
            lines = tf.strings.regex_replace(lines, r"[\[\] ]", "")
        return tf.stack(tf.io.decode_csv(lines, [[0.0]] * COLUMNS), axis=1)
    return decode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.transform.shape_tfdata",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--kind", required=True, choices=["files", "json", "records", "table"])
    parser.add_argument("--framing", default="", help="records: tfrecord|recordio; table: csv|jsonl|csv-id|jsonl-id")
    parser.add_argument("--float", action="store_true", help="files: a float-input model's serving_default")
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--join", action="store_true", help="table: JoinSource=Input, each line beside its prediction")
    parser.add_argument("--raw", action="store_true",
                        help="files, --float: PNG or JPEG pixels as they are (0-255, no resize), as the CIFAR-10 "
                             "script sends them")
    args = parser.parse_args(argv)
    print(json.dumps(run(args.kind, args.model_dir, args.input, args.output, batch_size=args.batch_size,
                         float_model=args.float, framing=args.framing, join=args.join, raw=args.raw)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
