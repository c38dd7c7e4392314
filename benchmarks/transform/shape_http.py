"""Contender (c) for every job shape: SageMaker Batch Transform's agent, one request per payload.

The agent reads each input object, splits it into records (SplitType), groups them into
payloads (SingleRecord: one record, framing stripped; MultiRecord: whole records up to
MaxPayloadInMB, framing kept), and sends each payload as one HTTP request with
MaxConcurrentTransforms in flight. In the container, ``input_handler`` (or the default JSON /
CSV / JSON Lines handler when there is no script) turns the payload into a TFS REST body,
TF Serving predicts, ``output_handler`` (or pass-through) forms the answer, and the agent
assembles each object's answers in order (AssembleWith Line: a newline after each). With
DataProcessing the agent applies the InputFilter to each record before forming payloads, and
after the answer the JoinSource/OutputFilter to each record with its own prediction row (the
answer's ``predictions`` cut per record), with tfbatch's ``DataProcessor`` standing in for the
agent's own code.
The TFS-style server is :mod:`benchmarks.transform.http_baseline`'s; this module is the client
(agent + container handler layer in one process, as that module's client is for JPEGs).

    python -m benchmarks.transform.shape_http --url URL --model model.tar.gz --input DIR \\
        --output DIR --content-type text/csv --split-type Line --batch-strategy MultiRecord
"""

from __future__ import annotations

import argparse
import io
import json
import struct
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterator

RECORDIO_MAGIC = 0xCED7230A
MAX_RETRIES = 3


def split_records(data: bytes, split_type: str) -> Iterator[tuple[bytes, bytes]]:
    """``(framed, stripped)`` per record: the record with and without its framing."""
    if split_type == "None":
        yield data, data
    elif split_type == "Line":
        for line in data.splitlines(keepends=True):
            stripped = line.rstrip(b"\r\n")
            if stripped.strip():
                yield line, stripped
    elif split_type == "TFRecord":
        at = 0
        while at < len(data):
            if at + 12 > len(data):
                raise ValueError(f"byte {at}: truncated TFRecord header")
            (length,) = struct.unpack_from("<Q", data, at)
            end = at + 12 + length + 4
            if end > len(data):
                raise ValueError(f"byte {at}: TFRecord of {length} bytes runs past the end")
            yield data[at:end], data[at + 12:at + 12 + length]
            at = end
    elif split_type == "RecordIO":
        at = 0
        while at + 8 <= len(data):
            magic, lrec = struct.unpack_from("<II", data, at)
            if magic != RECORDIO_MAGIC:
                raise ValueError(f"byte {at}: expected RecordIO magic, got {magic:#x}")
            length = lrec & ((1 << 29) - 1)
            end = at + 8 + length + (-length % 4)
            yield data[at:end], data[at + 8:at + 8 + length]
            at = end
    else:
        raise ValueError(f"split type {split_type!r}: expected None, Line, TFRecord or RecordIO")


def payloads(data: bytes, split_type: str, strategy: str, max_bytes: int) -> list[bytes]:
    """Request bodies for one object, in order (a payload never spans two objects)."""
    records = split_records(data, split_type)
    if strategy == "SingleRecord":
        return [stripped for _, stripped in records]
    out: list[bytes] = []
    current: list[bytes] = []
    size = 0
    for framed, _ in records:
        if current and size + len(framed) > max_bytes:
            out.append(b"".join(current))
            current, size = [], 0
        current.append(framed)
        size += len(framed)
    if current:
        out.append(b"".join(current))
    return out


def run_client(url: str, archive: str | None, input_dir: str, output_dir: str, *, content_type: str,
               split_type: str, strategy: str, max_payload_mb: float, assemble: str,
               concurrency: int = 64, model_name: str = "model", input_filter: str | None = None,
               output_filter: str | None = None, join_source: str | None = None, grpc: bool = False) -> dict:
    import requests

    from benchmarks.transform.http_baseline import load_script
    from benchmarks.transform.s3_inputs import Outputs
    from tfbatch.handlers.context import Context
    from tfbatch.handlers.defaults import json_request
    from tfbatch.records.join import DataProcessor

    processor = DataProcessor(input_filter, output_filter, join_source, content_type, None)
    script = load_script(archive) if archive else None
    rest_uri = f"{url.rstrip('/')}/v1/models/{model_name}:predict"
    # The container hands its handler TF Serving's gRPC port too (the server's, when it runs one).
    grpc_port = int(requests.get(f"{url.rstrip('/')}/grpc-port", timeout=30).text) if grpc else None
    outputs = Outputs(output_dir)  # files, or for s3:// each output PUT by upload threads as it is assembled
    remote = input_dir.startswith("s3://")
    # s3:// objects of one payload each: every agent thread GETs its object before the request;
    # objects split into records: GET a few ahead, in order, then split as a local file is.
    fetch_each = remote and split_type == "None" and not processor.active
    root = Path(input_dir)
    if remote:
        from benchmarks.transform.s3_inputs import (FILE_READERS, FILE_WINDOW, client, list_keys, read_in_order,
                                                    split_uri)

        s3 = client(concurrency)
        bucket, prefix = split_uri(input_dir)
        root = Path(prefix)
        files = [Path(key) for key in list_keys(input_dir, s3)]
    else:
        files = sorted(p for p in root.rglob("*") if p.is_file())
    local = threading.local()
    max_bytes = int(max_payload_mb * 2**20)
    started = time.monotonic()

    def post(body: bytes | str) -> "requests.Response":
        session = getattr(local, "session", None) or requests.Session()
        local.session = session
        for attempt in range(MAX_RETRIES + 1):
            try:
                return session.post(rest_uri, data=body, headers={"Content-Type": "application/json"})
            except requests.ConnectionError:
                if attempt == MAX_RETRIES:
                    raise
                session = local.session = requests.Session()
        raise AssertionError("unreachable")

    def one(body: bytes) -> bytes:
        context = Context(model_name, None, "predict", rest_uri, grpc_port, None, None, content_type,
                          "application/json", len(body))
        if script is not None and hasattr(script, "handler"):
            # A single handler POSTs to context.rest_uri itself (its own connection per call,
            # as the container's scripts do).
            result, _ = script.handler(io.BytesIO(body), context)
            return result if isinstance(result, bytes) else result.encode()
        if script is not None:
            response = post(script.input_handler(io.BytesIO(body), context))
            result, _ = script.output_handler(response, context)
            return result if isinstance(result, bytes) else result.encode()
        response = post(json.dumps(json_request(body, content_type)))
        if response.status_code != 200:
            raise ValueError(response.content.decode("utf-8", "replace"))
        return response.content

    def processed(body: bytes, records: list[bytes]) -> bytes:
        answer = one(body)
        return _process(processor, records, answer) if processor.active else answer

    failures: list[str] = []
    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="agent") as pool:
        # One object at a time in the submit order, but its payloads and the next objects'
        # overlap: the pool holds at most ``concurrency`` requests in flight.
        pending: list[tuple[Path, list]] = []

        def fetched(key: str) -> bytes:
            return one(s3.get_object(Bucket=bucket, Key=key)["Body"].read())

        if fetch_each:
            objects = ((path, b"") for path in files)
        elif remote:
            objects = ((Path(key), data) for key, data in read_in_order(input_dir, [str(p) for p in files],
                                                                        FILE_READERS, FILE_WINDOW))
        else:
            objects = ((path, path.read_bytes()) for path in files)
        for path, data in objects:
            if fetch_each:
                futures = [pool.submit(fetched, str(path))]
            elif processor.active:
                futures = [pool.submit(processed, body, records) for body, records
                           in filtered_payloads(data, split_type, strategy, max_bytes, processor)]
            else:
                futures = [pool.submit(one, b) for b in payloads(data, split_type, strategy, max_bytes)]
            pending.append((path, futures))
            while len(pending) > concurrency:
                _finish(pending.pop(0), root, outputs.write, assemble, failures)
        for item in pending:
            _finish(item, root, outputs.write, assemble, failures)
    outputs.close()
    return {"objects": len(files) - len(failures), "failed": failures[:5], "seconds": time.monotonic() - started}


def filtered_payloads(data: bytes, split_type: str, strategy: str, max_bytes: int,
                      processor) -> list[tuple[bytes, list[bytes]]]:
    """``(body, records)`` per request: the InputFilter applied to each record, the bodies formed
    from the filtered records (framed again by a newline for Line), the raw records kept."""
    records = [stripped for _, stripped in split_records(data, split_type)]
    sep = b"\n" if split_type == "Line" and strategy == "MultiRecord" else b""
    out: list[tuple[bytes, list[bytes]]] = []
    current: list[bytes] = []
    raw: list[bytes] = []
    size = 0
    for record in records:
        body = processor.filter_input(record) + sep
        if strategy == "SingleRecord" or (current and size + len(body) > max_bytes):
            if current:
                out.append((b"".join(current), raw))
            current, raw, size = [], [], 0
        current.append(body)
        raw.append(record)
        size += len(body)
    if current:
        out.append((b"".join(current), raw))
    return out


def _process(processor, records: list[bytes], answer: bytes) -> bytes:
    """JoinSource/OutputFilter per record, each with its own row of the answer's predictions."""
    import orjson

    rows = orjson.loads(answer)["predictions"]
    if len(rows) != len(records):
        raise ValueError(f"{len(records)} records but {len(rows)} predictions")
    return b"\n".join(processor.process_output(record, orjson.dumps({"predictions": [row]}))
                      for record, row in zip(records, rows))


def _finish(item: tuple[Path, list], root: Path, write, assemble: str, failures: list[str]) -> None:
    path, futures = item
    try:
        answers = [f.result() for f in futures]
    except Exception as exc:  # noqa: BLE001 - SageMaker fails the object and moves on
        failures.append(f"{path.name}: {exc}")
        return
    sep = b"\n" if assemble == "Line" else b""
    write(str(path.relative_to(root)) + ".out", b"".join(a + sep for a in answers))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.transform.shape_http",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--model", help="model.tar.gz whose code/inference.py runs here (none: default handlers)")
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--content-type", required=True)
    parser.add_argument("--split-type", default="None", choices=["None", "Line", "TFRecord", "RecordIO"])
    parser.add_argument("--batch-strategy", default="SingleRecord", choices=["SingleRecord", "MultiRecord"])
    parser.add_argument("--max-payload-mb", type=float, default=6)
    parser.add_argument("--assemble-with", default="None", choices=["None", "Line"])
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--join-source", default="None", choices=["None", "Input"])
    parser.add_argument("--input-filter")
    parser.add_argument("--output-filter")
    parser.add_argument("--grpc", action="store_true", help="give the handler the server's gRPC port (GET /grpc-port)")
    args = parser.parse_args(argv)
    result = run_client(args.url, args.model, args.input, args.output, content_type=args.content_type,
                        split_type=args.split_type, strategy=args.batch_strategy,
                        max_payload_mb=args.max_payload_mb, assemble=args.assemble_with,
                        concurrency=args.concurrency, input_filter=args.input_filter,
                        output_filter=args.output_filter, join_source=args.join_source, grpc=args.grpc)
    print(json.dumps(result))
    return 0 if not result["failed"] else 1


if __name__ == "__main__":
    sys.exit(main())
