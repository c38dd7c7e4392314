"""Job-shape benchmark: tfbatch vs an expert tf.data script vs one HTTP request per payload.

For each job shape (issue 21's table), three contenders run in the same invocation, on the
same inputs and model, each in fresh processes (start-up included):

  (a) ``python -m tfbatch transform`` with the job's CreateTransformJob settings;
  (b) the tf.data script an expert writes for that job (:mod:`.shape_tfdata`);
  (c) SageMaker's design: a TFS-style REST server (:mod:`.http_baseline`) and an agent
      sending one request per payload, 64 in flight (:mod:`.shape_http`).

Every output object is read back and compared with (b)'s (same rows within float rounding),
so no contender wins by doing less.

    python -m benchmarks.transform.shapes --shapes all --repeat 1 --scale 0.4 \\
        --out benchmarks/transform/shapes-before.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from typing import Any, Callable

from benchmarks.transform import shape_data as data
from benchmarks.transform.shape_http import split_records
from benchmarks.transform.shape_outputs import agreement, ratio

PY = sys.executable
IMAGES = 5000  # at --scale 1
LARGE_IMAGES = 1000  # 100-200 KB photos (jpeg-large) at --scale 1
TABLE_ROWS = 5000  # rows per CSV / JSON Lines file at --scale 1


@dataclass
class Job:
    """One shape made concrete: inputs, the three contenders' commands (output folder last)."""

    input: Path
    records: int
    objects: int
    a: list[str]
    b: list[str]
    c_server: list[str]
    c_client: list[str]
    split: str = "None"  # how to count an object's records (shape_http.split_records)
    uri: str | None = None  # --storage s3: where the inputs were uploaded (every --input points there)
    outputs_uri: str | None = None  # --s3-outputs: each run writes under its own prefix below this

    def half(self) -> "Job":
        """The same job on the first half of the objects (hard links in a sibling folder).

        With 10 or 20 objects that finish in clumps, output times cannot show a steady rate;
        the difference between the whole job and this half job can: start-up cancels out."""
        files = sorted(p for p in self.input.iterdir() if p.is_file())[: self.objects // 2]
        folder = self.input.with_name(self.input.name + "-half")
        if sorted(p.name for p in folder.glob("*")) != [p.name for p in files]:
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            for f in files:
                os.link(f, folder / f.name)
        records = sum(1 for f in files for _ in split_records(f.read_bytes(), self.split))
        moves = {str(self.input): str(folder)}
        uri = None
        if self.uri is not None:  # the half's objects under their own prefix, uploaded once
            uri = self.uri.rstrip("/") + "-half/"
            moves[self.uri] = uri
            if uri not in _UPLOADED:
                from benchmarks.transform.s3_inputs import upload

                upload(folder, uri)
                _UPLOADED.add(uri)
        swap = lambda cmd: [moves.get(part, part) for part in cmd]  # noqa: E731
        return Job(folder, records, len(files), swap(self.a), swap(self.b), swap(self.c_server),
                   swap(self.c_client), self.split, uri, self.outputs_uri)


_UPLOADED: set[str] = set()  # --storage s3: half jobs' prefixes already on the server


@dataclass(frozen=True)
class Scale:
    """Fractions of the full sizes: ``images`` (5,000 JPEGs) and ``table`` (20 x 5,000 rows;
    rows are cheap, and too few leave nothing but start-up to measure)."""

    images: float
    table: float = 1.0


@dataclass
class Shape:
    name: str
    title: str
    build: Callable[[Path, Scale], Job]
    # Left out of ``--shapes all`` (named, it runs): ``jpeg-anysize``'s HTTP contender sends every
    # pixel as JSON, ~0.4 s of CPU per image, half an hour a round at --scale 1.
    in_all: bool = True


def _tfbatch(archive: Path, inputs: Path, content_type: str, *flags: str) -> list[str]:
    return [PY, "-m", "tfbatch", "transform", "--model", str(archive), "--input", str(inputs),
            "--content-type", content_type, *flags]


def _server(archive: Path) -> list[str]:
    return [PY, "-m", "benchmarks.transform.http_baseline", "serve", "--model", str(archive)]


def _client(archive: Path | None, inputs: Path, content_type: str, *flags: str) -> list[str]:
    model = ["--model", str(archive)] if archive else []
    return [PY, "-m", "benchmarks.transform.shape_http", *model, "--input", str(inputs),
            "--content-type", content_type, *flags]


def _tfdata(kind: str, model_dir: Path, inputs: Path, *flags: str) -> list[str]:
    return [PY, "-m", "benchmarks.transform.shape_tfdata", "--kind", kind, "--model-dir", str(model_dir),
            "--input", str(inputs), *flags]


def _count(scale: Scale) -> int:
    return max(20, round(IMAGES * scale.images))


def _tiny(workdir: Path) -> Path:
    from benchmarks.common.models import ensure_artifact

    return ensure_artifact("tiny", workdir)


def jpeg_bytes(workdir: Path, scale: Scale, *, script: bool = False) -> Job:
    n = _count(scale)
    inputs, tiny = data.jpegs(workdir, n), _tiny(workdir)
    from benchmarks.common.models import scriptless_archive

    a_archive = tiny / "model.tar.gz" if script else scriptless_archive(tiny)
    return Job(inputs, n, n, _tfbatch(a_archive, inputs, "application/x-image"),
               _tfdata("files", tiny / "savedmodel" / "1", inputs),
               _server(tiny / "model.tar.gz"), _client(tiny / "model.tar.gz", inputs, "application/x-image"))


def jpeg_handler(workdir: Path, scale: Scale, *, grpc: bool = False, session: bool = False) -> Job:
    """A single handler calling the model itself: POSTs to context.rest_uri (with ``session``,
    through one ``requests.Session`` made at import), or (``grpc``) seed 003's PredictRequest to
    context.grpc_port, which the HTTP design's container handler then sends to the baseline
    server's gRPC port."""
    n = _count(scale)
    inputs, tiny = data.jpegs(workdir, n), _tiny(workdir)
    name, script = ("grpc-handler", data.GRPC_HANDLER_SCRIPT) if grpc else \
        ("session-handler", data.SESSION_HANDLER_SCRIPT) if session else ("handler", data.HANDLER_SCRIPT)
    archive = data.scripted_archive(tiny, name, script)
    wire = ["--grpc"] if grpc else []
    return Job(inputs, n, n, _tfbatch(archive, inputs, "application/x-image"),
               _tfdata("files", tiny / "savedmodel" / "1", inputs),
               _server(archive) + wire, _client(archive, inputs, "application/x-image") + wire)


def jpeg_float(workdir: Path, scale: Scale, *, script: bool = False, named: bool = False) -> Job:
    n = _count(scale)
    inputs = data.jpegs(workdir, n)
    model = data.keras_artifact("float64", workdir, data.FLOAT_IMAGE_SCRIPT)
    # script: the artifact a SageMaker user already has, unchanged (its inference.py decodes
    # with PIL and sends JSON floats, as the TFS container needs), which (c) runs too.
    archive = model / ("model.tar.gz" if script else "model-noscript.tar.gz")
    if named:  # that script naming its signature and returning bytes
        archive = data.scripted_archive(model, "named", data.NAMED_FLOAT_IMAGE_SCRIPT)
    return Job(inputs, n, n, _tfbatch(archive, inputs, "application/x-image"),
               _tfdata("files", model / "savedmodel" / "1", inputs, "--float"),
               _server(archive if named else model / "model.tar.gz"),
               _client(archive if named else model / "model.tar.gz", inputs, "application/x-image"))


def jpeg_large(workdir: Path, scale: Scale) -> Job:
    """The ``jpeg-float`` job on photos of 100-200 KB (640-2,048 pixels on the long side) instead
    of 22 KB thumbnails: the decode and the downscale to 64 x 64 are most of the work."""
    n = max(20, round(LARGE_IMAGES * scale.images))
    inputs = data.jpegs(workdir, n, large=True)
    model = data.keras_artifact("float64", workdir, data.FLOAT_IMAGE_SCRIPT)
    return Job(inputs, n, n, _tfbatch(model / "model-noscript.tar.gz", inputs, "application/x-image"),
               _tfdata("files", model / "savedmodel" / "1", inputs, "--float"),
               _server(model / "model.tar.gz"), _client(model / "model.tar.gz", inputs, "application/x-image"))


def png_float(workdir: Path, scale: Scale) -> Job:
    """The ``jpeg-float`` job on 32 x 32 PNGs (``png-cifar-script``'s inputs), no script: tfbatch
    decodes each PNG and resizes it to the model's 64 x 64, the expert with ``decode_png``."""
    n = _count(scale)
    inputs = data.pngs(workdir, n)
    model = data.keras_artifact("float64", workdir, data.FLOAT_IMAGE_SCRIPT)
    return Job(inputs, n, n, _tfbatch(model / "model-noscript.tar.gz", inputs, "application/x-image"),
               _tfdata("files", model / "savedmodel" / "1", inputs, "--float"),
               _server(model / "model.tar.gz"), _client(model / "model.tar.gz", inputs, "application/x-image"))


def png_cifar(workdir: Path, scale: Scale) -> Job:
    """Seed 002's batch job: CIFAR-10-sized PNGs (32 x 32), its CNN (float32 ``[None, 32, 32, 3]``)
    and its script (PIL, the pixels as JSON integers). Every contender feeds the model the
    pixels as they are (0-255): tfbatch and the HTTP design by running the script, the expert
    with ``decode_png`` and a cast (``shape_tfdata --float --raw``)."""
    n = _count(scale)
    inputs = data.pngs(workdir, n)
    model = data.keras_artifact("cifar", workdir, data.CIFAR_SCRIPT)
    archive = model / "model.tar.gz"
    return Job(inputs, n, n, _tfbatch(archive, inputs, "application/x-image"),
               _tfdata("files", model / "savedmodel" / "1", inputs, "--float", "--raw"),
               _server(archive), _client(archive, inputs, "application/x-image"))


def jpeg_anysize(workdir: Path, scale: Scale) -> Job:
    n = _count(scale)
    inputs = data.jpegs(workdir, n)
    model = data.keras_artifact("anysize", workdir, data.ANYSIZE_IMAGE_SCRIPT)
    return Job(inputs, n, n, _tfbatch(model / "model-noscript.tar.gz", inputs, "application/x-image"),
               _tfdata("files", model / "savedmodel" / "1", inputs, "--float", "--batch-size", "1"),
               _server(model / "model.tar.gz"), _client(model / "model.tar.gz", inputs, "application/x-image"))


def json_float(workdir: Path, scale: Scale) -> Job:
    n = _count(scale)
    inputs = data.json_images(workdir, n)
    model = data.keras_artifact("float64", workdir, data.FLOAT_IMAGE_SCRIPT)
    noscript = model / "model-noscript.tar.gz"
    return Job(inputs, n, n, _tfbatch(noscript, inputs, "application/json"),
               _tfdata("json", model / "savedmodel" / "1", inputs),
               _server(noscript), _client(None, inputs, "application/json"))


def framed_images(workdir: Path, scale: Scale, *, framing: str, multi: bool = False) -> Job:
    n = _count(scale)
    inputs, tiny = data.framed(workdir, framing, n), _tiny(workdir)
    # RecordIO skips the few images that hold its magic (shape_data.recordio_frame): count what is there.
    records = n if framing == "tfrecord" else sum(
        1 for f in inputs.iterdir() for _ in split_records(f.read_bytes(), "RecordIO"))
    split = "TFRecord" if framing == "tfrecord" else "RecordIO"
    if framing == "tfrecord":
        archive = data.scripted_archive(tiny, "tfrecord", data.TFRECORD_SCRIPT)
        a_archive, content_type = archive, "application/x-tfexample"
        job_flags = ["--split-type", split, "--batch-strategy", "SingleRecord", "--assemble-with", "Line"]
    elif multi:
        archive = a_archive = data.scripted_archive(tiny, "recordio-multi", data.RECORDIO_MULTI_SCRIPT)
        content_type = "application/x-recordio"
        job_flags = ["--split-type", split, "--batch-strategy", "MultiRecord", "--max-payload-mb", "1",
                     "--assemble-with", "Line"]
    else:
        from benchmarks.common.models import scriptless_archive

        archive, a_archive, content_type = tiny / "model.tar.gz", scriptless_archive(tiny), "application/x-image"
        job_flags = ["--split-type", split, "--batch-strategy", "SingleRecord", "--assemble-with", "Line"]
    return Job(inputs, records, data.SHARDS, _tfbatch(a_archive, inputs, content_type, *job_flags),
               _tfdata("records", tiny / "savedmodel" / "1", inputs, "--framing", framing),
               _server(archive), _client(archive, inputs, content_type, *job_flags), split)


def table(workdir: Path, scale: Scale, *, framing: str, strategy: str = "MultiRecord",
          content_type: str | None = None, join: bool = False, script: bool = False, handler: bool = False) -> Job:
    """Rows of 32 floats, ``--split-type Line``: MultiRecord (1 MB payloads) or SingleRecord
    (the job's default: one line per request; tfbatch joins them, the HTTP design cannot).
    The expert's tf.data script is the same for both: it batches lines whatever the strategy.
    ``join``: JoinSource=Input, every contender writes each line beside its prediction.
    ``script``: tfbatch and the HTTP design run the usual CSV ``inference.py`` (lines to
    "instances" JSON) on each payload; the expert's script has no use for it. ``handler``: the
    same as a single ``handler`` that POSTs the JSON to context.rest_uri."""
    rows = max(100, round(TABLE_ROWS * scale.table))
    inputs = data.table(workdir, framing, rows)
    model = data.keras_artifact("vec32", workdir)
    content_type = content_type or ("text/csv" if framing.startswith("csv") else "application/jsonlines")
    flags = ["--split-type", "Line", "--batch-strategy", strategy, "--assemble-with", "Line"]
    if strategy == "MultiRecord":
        flags[4:4] = ["--max-payload-mb", "1"]
    if join:
        flags += ["--join-source", "Input"]
    if framing == "csv-id":  # the SageMaker guide's job: the id left out, then joined back alone
        flags += ["--input-filter", "$[1:]", "--output-filter", "$[0,-10:]"]
    elif framing == "jsonl-id":
        flags += ["--input-filter", "$.features", "--output-filter", "$['id','SageMakerOutput']"]
    noscript = model / "model-noscript.tar.gz"
    archive = data.scripted_archive(model, "csv-script", data.CSV_SCRIPT) if script else \
        data.scripted_archive(model, "csv-handler", data.CSV_HANDLER_SCRIPT) if handler else noscript
    script = script or handler
    return Job(inputs, rows * data.TABLE_FILES, data.TABLE_FILES, _tfbatch(archive, inputs, content_type, *flags),
               _tfdata("table", model / "savedmodel" / "1", inputs, "--framing", framing, "--batch-size", "1024",
                       *(["--join"] if join else [])),
               _server(noscript), _client(archive if script else None, inputs, content_type, *flags), "Line")


SHAPES = [
    Shape("jpeg-bytes", "no script, string-input signature (batch lane)", jpeg_bytes),
    Shape("jpeg-float", "no script, float-input Keras signature [None,64,64,3], decoded by tfbatch", jpeg_float),
    Shape("jpeg-large", "no script, float-input Keras signature [None,64,64,3], 100-200 KB photos (1,000 at "
          "--scale 1) decoded and downscaled by tfbatch", jpeg_large),
    Shape("png-float", "no script, float-input Keras signature [None,64,64,3], 32x32 PNGs decoded and upscaled "
          "by tfbatch", png_float),
    Shape("jpeg-anysize", "no script, fully convolutional Keras signature [None,None,None,3]: each image at its "
          "own size (tf.data: batches of one; HTTP: the script sends every pixel as JSON)", jpeg_anysize,
          in_all=False),
    Shape("jpeg-script", "input_handler/output_handler pair, tiny model",
          lambda w, s: jpeg_bytes(w, s, script=True)),
    Shape("jpeg-handler", "a single handler that POSTs each image to context.rest_uri, tiny model", jpeg_handler),
    Shape("jpeg-session-handler", "the jpeg-handler script with one requests.Session made at import, "
          "session.post(...) per image", lambda w, s: jpeg_handler(w, s, session=True)),
    Shape("jpeg-grpc-handler", "seed 003's single handler: a PredictRequest to context.grpc_port over a new "
          "channel per image, Predict.future().result(), tiny model", lambda w, s: jpeg_handler(w, s, grpc=True)),
    Shape("jpeg-float-script", "float-input Keras model with the SageMaker script it needs (PIL decode, JSON floats)",
          lambda w, s: jpeg_float(w, s, script=True)),
    Shape("jpeg-float-script-named", "the jpeg-float-script job whose script names the signature "
          "({\"signature_name\": ..., \"instances\": ...}) and returns the JSON as bytes",
          lambda w, s: jpeg_float(w, s, script=True, named=True)),
    Shape("png-cifar-script", "seed 002's job: 32x32 PNGs, its CIFAR-10 CNN (float32 [None,32,32,3]) and its "
          "script (PIL, pixels as JSON integers)", png_cifar),
    Shape("json-float", "one JSON request body per file ({\"instances\": [64x64x3 floats]}), float-input Keras "
          "model, no script", json_float),
    Shape("tfrecord", "TFRecord shards, SingleRecord, AssembleWith Line, Example-parsing inference.py (seed 004)",
          lambda w, s: framed_images(w, s, framing="tfrecord")),
    Shape("csv", "CSV, Line, MultiRecord 1 MB, float-input model, no script (20 files)",
          lambda w, s: table(w, s, framing="csv")),
    Shape("jsonl", "JSON Lines, Line, MultiRecord 1 MB, float-input model, no script (20 files)",
          lambda w, s: table(w, s, framing="jsonl")),
    Shape("json-lines", "one JSON array per line sent as application/json, Line, MultiRecord 1 MB, float-input "
          "model, no script (20 files)",
          lambda w, s: table(w, s, framing="jsonl", content_type="application/json")),
    Shape("csv-script", "CSV, Line, MultiRecord 1 MB, the usual inference.py that turns each payload's lines "
          "into TF Serving \"instances\" JSON, float-input model (20 files)",
          lambda w, s: table(w, s, framing="csv", script=True)),
    Shape("csv-script-single", "the csv-script job as SingleRecord (a job's strategy when it names none): each "
          "line one request through the script's hooks (20 files)",
          lambda w, s: table(w, s, framing="csv", script=True, strategy="SingleRecord")),
    Shape("csv-handler", "CSV, Line, MultiRecord 1 MB, the csv-script job's script as a single handler that "
          "POSTs each payload's rows to context.rest_uri (20 files)",
          lambda w, s: table(w, s, framing="csv", handler=True)),
    Shape("csv-handler-single", "the csv-handler job as SingleRecord: each line one call of the handler (20 files)",
          lambda w, s: table(w, s, framing="csv", handler=True, strategy="SingleRecord")),
    Shape("csv-join", "CSV, Line, MultiRecord 1 MB, JoinSource=Input (each row written back with its "
          "prediction), float-input model, no script (20 files)", lambda w, s: table(w, s, framing="csv", join=True)),
    Shape("jsonl-join", "JSON Lines, Line, MultiRecord 1 MB, JoinSource=Input ({\"SageMakerInput\": row, "
          "\"SageMakerOutput\": prediction}), float-input model, no script (20 files)",
          lambda w, s: table(w, s, framing="jsonl", join=True)),
    Shape("csv-id", "CSV with an id column, InputFilter $[1:], JoinSource=Input, OutputFilter $[0,-10:] "
          "(the SageMaker guide's job: the id and the prediction), MultiRecord 1 MB, no script (20 files)",
          lambda w, s: table(w, s, framing="csv-id", join=True)),
    Shape("jsonl-id", "JSON Lines {\"id\", \"features\"}, InputFilter $.features, JoinSource=Input, "
          "OutputFilter $['id','SageMakerOutput'], MultiRecord 1 MB, no script (20 files)",
          lambda w, s: table(w, s, framing="jsonl-id", join=True)),
    Shape("csv-id-single", "the csv-id job as SingleRecord (a job's strategy when it names none): one line per "
          "request to the HTTP design; tfbatch joins lines after the InputFilter (20 files)",
          lambda w, s: table(w, s, framing="csv-id", strategy="SingleRecord", join=True)),
    Shape("csv-single", "CSV, Line, SingleRecord (the default strategy: one line per request), float-input "
          "model, no script (20 files)", lambda w, s: table(w, s, framing="csv", strategy="SingleRecord")),
    Shape("jsonl-single", "JSON Lines, Line, SingleRecord, float-input model, no script (20 files)",
          lambda w, s: table(w, s, framing="jsonl", strategy="SingleRecord")),
    Shape("json-lines-single", "one JSON array per line sent as application/json, Line, SingleRecord, "
          "float-input model, no script (20 files)",
          lambda w, s: table(w, s, framing="jsonl", strategy="SingleRecord", content_type="application/json")),
    Shape("recordio", "RecordIO of JPEGs, SingleRecord, AssembleWith Line, no script",
          lambda w, s: framed_images(w, s, framing="recordio")),
    Shape("recordio-multi", "MultiRecord image job: RecordIO of JPEGs, MultiRecord 1 MB, splitting inference.py",
          lambda w, s: framed_images(w, s, framing="recordio", multi=True)),
]


def _key(contender: str, job: Job) -> tuple:
    """Identical commands on identical inputs are one measurement per round (jpeg-bytes and
    jpeg-script share (b) and (c)); the table says which shape ran it."""
    parts = {"a": job.a, "b": job.b, "c": job.c_server + job.c_client}[contender]
    return (contender, tuple(parts))


MIN_OBJECTS_FOR_MTIME = 100


def marginal(full: dict, half: dict) -> dict:
    """Steady rate and CPU per record from two sizes of one job: (records, wall, CPU) of the
    whole job minus those of the half job, so start-up and shutdown cancel out."""
    d_records = full["records"] - half["records"]
    d_wall, d_cpu = full["wall_s"] - half["wall_s"], full["cpu_s"] - half["cpu_s"]
    ok = full["ok"] and half["ok"] and d_records > 0
    if not half["ok"] and full["ok"]:
        return {"ok": False, "error": f"half job: {half['error']}"}
    return {"steady_per_s": d_records / d_wall if ok and d_wall > 0 else None,
            "steady_cpu_ms_per_record": 1000 * d_cpu / d_records if ok and d_cpu > 0 else None}


def _tfbatch_batches(out: Path) -> dict | None:
    """What the tfbatch job chose (batch sizes, workers, the tuner's pick), from its report.json."""
    try:
        report = json.loads((out / "_tfbatch" / "report.json").read_text())
    except (OSError, ValueError):
        return None
    return {name: {k: v for k, v in stats.items() if k in ("batch_sizes", "batches", "workers", "lane", "predict",
                                                          "in_flight_objects", "chosen_by", "handler_workers",
                                                          "handler_workers_max")}
            | {"chosen": (stats.get("autotune") or {}).get("chosen")}
            for name, stats in (report.get("batches") or {}).items()}


def run_shape(shape: Shape, job: Job, workdir: Path, order: str, cache: dict, timeout_s: float) -> dict:
    from benchmarks.transform import shape_runner

    runs: dict[str, dict] = {}
    for c in order:
        key = _key(c, job)
        if key in cache:
            runs[c] = {**cache[key], "shared_with": cache[key]["shape"]}
        else:
            out = workdir / "outputs" / shape.name / c
            half = None
            if job.objects < MIN_OBJECTS_FOR_MTIME:
                small = job.half()
                half = shape_runner.run(c, small, out.with_name(c + "-half"), workdir / "logs", shape.name + "-half",
                                        timeout_s)
            runs[c] = shape_runner.run(c, job, out, workdir / "logs", shape.name, timeout_s)
            runs[c]["shape"] = shape.name
            if c == "a":
                runs[c]["tfbatch_batches"] = _tfbatch_batches(out)
            runs[c]["steady_method"] = "output times" if half is None else "whole job minus half job"
            if half is not None:
                runs[c].update(marginal(runs[c], half))
                runs[c]["half"] = {k: v for k, v in half.items() if k != "_rows"}
            cache[key] = runs[c]
        r = runs[c]
        print(f"[{shape.name}] {c}: " + (f"{_f(r['steady_per_s'])} rec/s steady, {_f(r['end_to_end_per_s'])} "
              f"whole process, CPU {_f(r['steady_cpu_ms_per_record'], 2)} ms/rec" if r["ok"] else
              f"FAILED: {r['error']}"), flush=True)
    if "b" in runs and runs["b"]["_rows"]:
        for c, r in runs.items():
            if c != "b":
                r["agreement_with_b"] = agreement(runs["b"]["_rows"], r["_rows"])
    ratios = {}
    for other in ("b", "c"):
        if "a" in runs and other in runs and runs["a"]["ok"] and runs[other]["ok"]:
            ratios[f"a/{other}"] = {k: ratio(runs["a"][k], runs[other][k]) for k in ("steady_per_s", "end_to_end_per_s")}
    return {"runs": runs, "ratios": ratios}


def _f(value: Any, digits: int = 1) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def markdown(results: dict) -> str:
    lines = ["# Job shapes: tfbatch (a) vs expert tf.data (b) vs HTTP per payload (c)", "",
             f"`{results['command']}`", "",
             f"{results['started']}, {results['machine'].get('cpus')} CPUs ({results['machine'].get('cpu_model')}), "
             f"commit {results['machine'].get('git_commit')}, scale {results['scale']}, "
             f"load average before {results['load_average_before'][0]:.2f}, after {results['load_average_after'][0]:.2f}. "
             + results["note"], "",
             *(["Inputs on S3: a moto server process on loopback"
                + (f" behind a proxy adding {results['storage']['latency_ms']:g} ms to every request"
                   if results["storage"].get("latency_ms") else "")
                + " (benchmarks/transform/s3_inputs.py); outputs "
                + ("on the same server, each run under its own prefix." if results["storage"].get("outputs")
                   else "local."), ""]
               if isinstance(results.get("storage"), dict) else []),
             "Records/s steady / whole process; in brackets CPU ms per record, steady; whole process. "
             "Ratios are the median over rounds of a/b and a/c in the same round. "
             "`agrees` = every object has (b)'s rows within float rounding. Steady rates come from the output "
             "files' finish times, or, marked *, for shapes with few objects (which finish in clumps), from the "
             "whole job minus a run on its first half of the objects (start-up cancels out).", "",
             "`CPU` ratios are the other contender's steady CPU per record over (a)'s: above 1 means (a) needs "
             "less CPU per record, the load-robust reading on a shared machine (on 2 saturated cores throughput "
             "is about 2,000 / CPU ms per record).", "",
             "`CPU whole` is the same with every process's CPU from launch to exit (start-up included).", "",
             "| shape | records | (a) tfbatch | (b) tf.data | (c) HTTP | a/b steady | a/b whole | a/b CPU | a/b CPU whole "
             "| a/c steady | a/c whole | a/c CPU | a/c CPU whole | agrees a, c |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for name, shape in results["shapes"].items():
        last = {r["contender"]: r for r in shape["runs"] if r["round"] == shape["rounds"] - 1}
        cells = []
        for c in "abc":
            r = last.get(c)
            mark = "*" if r is not None and r.get("steady_method", "").startswith("whole") else ""
            cells.append("–" if r is None else (f"{_f(r['steady_per_s'], 0)}{mark} / {_f(r['end_to_end_per_s'], 0)} "
                                                f"({_f(r['steady_cpu_ms_per_record'], 2)}; "
                                                f"{_f(r['cpu_ms_per_record'], 2)})" if r["ok"] else "failed"))
        rat = shape["ratios"]
        # "–" where there is nothing to compare: the contender or (b) did not run.
        agree = ", ".join("yes" if last.get(c, {}).get("agreement_with_b", {}).get("same") else
                          ("–" if "agreement_with_b" not in last.get(c, {}) else "NO") for c in "ac")
        lines.append(f"| {name} | {shape['records']} | " + " | ".join(cells) + " | "
                     + " | ".join(_f(value, 2) + "×" for k in ("a/b", "a/c")
                                  for value in (rat.get(k, {}).get("steady_per_s"), rat.get(k, {}).get("end_to_end_per_s"),
                                                cpu_ratio(shape["runs"], k[-1]),
                                                cpu_ratio(shape["runs"], k[-1], "cpu_ms_per_record")))
                     + f" | {agree} |")
    lines += ["", "Shapes:", ""] + [f"- **{s.name}**: {s.title}" for s in SHAPES if s.name in results["shapes"]]
    return "\n".join(lines) + "\n"


def cpu_ratio(runs: list[dict], other: str, key: str = "steady_cpu_ms_per_record") -> float | None:
    """Median over rounds of other's CPU per record (steady by default) / (a)'s."""
    values = []
    for n in sorted({r["round"] for r in runs}):
        by = {r["contender"]: r for r in runs if r["round"] == n and r["ok"]}
        if "a" in by and other in by:
            value = ratio(by[other][key], by["a"][key])
            if value is not None:
                values.append(value)
    return median(values) if values else None


def _median_ratios(rounds: list[dict]) -> dict:
    out: dict = {}
    for key in ("a/b", "a/c"):
        for kind in ("steady_per_s", "end_to_end_per_s"):
            values = [r[key][kind] for r in rounds if key in r and r[key][kind] is not None]
            out.setdefault(key, {})[kind] = median(values) if values else None
    return out


def main(argv: list[str] | None = None) -> int:
    names = [s.name for s in SHAPES]
    parser = argparse.ArgumentParser(prog="python -m benchmarks.transform.shapes", description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="all", help="comma list of " + ", ".join(names) + ", or all "
                        "(all but " + ", ".join(s.name for s in SHAPES if not s.in_all) + ", whose HTTP contender "
                        "takes ~0.4 s of CPU per image)")
    parser.add_argument("--scale", type=float, default=0.4,
                        help="fraction of the full size (5,000 JPEGs; 20 x 5,000 rows); 0.4 keeps a run near 10 min on 2 cores")
    parser.add_argument("--table-scale", type=float, default=1.0,
                        help="--scale for the CSV and JSON Lines shapes (default full size: 20 x 5,000 rows)")
    parser.add_argument("--repeat", type=int, default=1, help="rounds; contender order rotates each round")
    parser.add_argument("--contenders", default="abc")
    parser.add_argument("--workdir", default=str(Path(tempfile.gettempdir()) / "tfbatch-bench-shapes"))
    parser.add_argument("--out", default="benchmarks/transform/shapes.json")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per contender")
    parser.add_argument("--storage", choices=["local", "s3"], default="local",
                        help="s3: every contender reads its inputs from a moto S3 server on loopback "
                             "(benchmarks/transform/s3_inputs.py); outputs stay local")
    parser.add_argument("--s3-outputs", action="store_true",
                        help="--storage s3: outputs go to the S3 server too (each run its own prefix), read "
                             "back after the run")
    parser.add_argument("--s3-latency-ms", type=float, default=0.0,
                        help="--storage s3: a proxy in front of the server delays every request this long")
    parser.add_argument("--note", default="")
    parser.add_argument("--render", metavar="JSON", help="only rewrite the markdown table of a results file")
    args = parser.parse_args(argv)
    if args.render:
        Path(args.render).with_suffix(".md").write_text(markdown(json.loads(Path(args.render).read_text())))
        return 0
    chosen = [s.name for s in SHAPES if s.in_all] if args.shapes == "all" else \
        [s.strip() for s in args.shapes.split(",") if s.strip()]
    unknown = sorted(set(chosen) - set(names))
    if unknown or args.repeat < 1 or not 0 < args.scale <= 10 or set(args.contenders) - set("abc"):
        parser.error(f"unknown shapes {unknown}" if unknown else "--repeat >= 1, 0 < --scale <= 10, --contenders from abc")
    with contextlib.ExitStack() as stack:
        storage = None
        if args.s3_outputs and args.storage != "s3":
            parser.error("--s3-outputs needs --storage s3")
        if args.storage == "s3":
            from benchmarks.transform.s3_inputs import Storage

            storage = stack.enter_context(Storage(args.s3_latency_ms))
        return _run(args, chosen, argv, storage)


def on_s3(job: Job, shape: str, outputs: bool = False) -> Job:
    """The same job with its inputs uploaded to the benchmark's S3 server, every contender's
    ``--input`` pointed there (s3_inputs.py); with ``outputs``, each run's ``--output`` goes under
    ``s3://BUCKET/outputs/`` too (shape_runner.run picks the run's own prefix and reads it back)."""
    from benchmarks.transform.s3_inputs import BUCKET, upload

    uri = f"s3://{BUCKET}/{shape}/"
    upload(job.input, uri)

    def moved(cmd: list[str]) -> list[str]:
        at = cmd.index("--input") + 1
        return cmd[:at] + [uri] + cmd[at + 1:]

    return Job(job.input, job.records, job.objects, moved(job.a), moved(job.b), job.c_server, moved(job.c_client),
               job.split, uri, f"s3://{BUCKET}/outputs/" if outputs else None)


def _run(args: argparse.Namespace, chosen: list[str], argv: list[str] | None, storage: Any) -> int:
    from benchmarks.transform.bench import machine

    workdir = Path(args.workdir)
    results: dict[str, Any] = {
        "command": "python -m benchmarks.transform.shapes " + " ".join(argv if argv is not None else sys.argv[1:]),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "machine": machine(), "scale": args.scale, "table_scale": args.table_scale,
        "load_average_before": os.getloadavg(), "note": args.note, "shapes": {},
        "storage": args.storage if storage is None else {"kind": "s3", "latency_ms": args.s3_latency_ms,
                                                                "outputs": args.s3_outputs}}
    jobs = {}
    for shape in SHAPES:
        if shape.name in chosen:
            print(f"preparing {shape.name} ...", flush=True)
            jobs[shape.name] = shape.build(workdir, Scale(args.scale, args.table_scale))
            if storage is not None:
                jobs[shape.name] = on_s3(jobs[shape.name], shape.name, args.s3_outputs)
            for path in jobs[shape.name].input.rglob("*"):  # the same warm page cache for everyone
                if path.is_file():
                    path.read_bytes()
    per_shape: dict[str, list] = {name: [] for name in jobs}
    for round_no in range(args.repeat):
        cache: dict = {}
        for shape in SHAPES:
            if shape.name not in jobs:
                continue
            k = round_no % len(args.contenders)
            result = run_shape(shape, jobs[shape.name], workdir, args.contenders[k:] + args.contenders[:k],
                               cache, args.timeout)
            per_shape[shape.name].append(result)
    from benchmarks.transform.shape_runner import empty_trash

    empty_trash(workdir / "outputs")  # earlier runs' outputs, set aside, not deleted mid-bench
    failed = False
    for name, rounds in per_shape.items():
        runs = []
        for n, r in enumerate(rounds):
            for c in sorted(r["runs"]):
                run = {k: v for k, v in r["runs"][c].items() if k != "_rows"}
                runs.append({**run, "round": n})
                failed |= not run["ok"] or not run.get("agreement_with_b", {"same": True})["same"]
        results["shapes"][name] = {"records": jobs[name].records, "objects": jobs[name].objects,
                                   "rounds": len(rounds), "runs": runs,
                                   "ratios": _median_ratios([r["ratios"] for r in rounds]),
                                   "ratios_per_round": [r["ratios"] for r in rounds]}
    results["load_average_after"] = os.getloadavg()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1, default=str))
    out.with_suffix(".md").write_text(markdown(results))
    print(out.with_suffix(".md").read_text())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
