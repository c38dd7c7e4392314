"""Contender (c): SageMaker Batch Transform's architecture, reproduced on this machine.

In SageMaker, an agent sends each image as its own HTTP request to the model container,
whose Python layer runs ``input_handler`` (base64 + JSON), POSTs that to TF Serving's REST
API, and hands the reply to ``output_handler``; TFS decodes JSON and base64, batches
requests (``SAGEMAKER_TFS_MAX_BATCH_SIZE`` 8, ``SAGEMAKER_TFS_BATCH_TIMEOUT_MICROS`` 1000)
and runs the model. TF Serving itself cannot be installed here, so:

* ``serve``: a REST model server speaking TFS's ``:predict`` API over the project's
  ModelServer with batching set from the SAGEMAKER_TFS defaults (``--server threaded``: a
  small ``ThreadingHTTPServer`` written for the benchmark, HTTP/1.1 keep-alive; or
  ``--server tfs-app``: the project's own Starlette/uvicorn TFS REST app).
* ``client``: the agent plus the container's handler layer in one process: ``--concurrency``
  threads (SageMaker's MaxConcurrentTransforms, 64 in the seed), each with its own
  ``requests.Session``, run the artifact's ``input_handler``, POST one image per request,
  run ``output_handler`` and write ``<name>.out``.

This leaves out SageMaker's extra hop (agent -> nginx -> gunicorn -> TFS): the reproduction
is, if anything, kind to SageMaker.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import os
import shutil
import sys
import tarfile
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

# SageMaker TFS container defaults when batching is on; SAGEMAKER_BATCH=true lifts the
# queue bound (max_enqueued_batches 100000000), as the container does in transform jobs.
SAGEMAKER_TFS_ENV = {
    "SAGEMAKER_TFS_ENABLE_BATCHING": "true",
    "SAGEMAKER_TFS_MAX_BATCH_SIZE": "8",
    "SAGEMAKER_TFS_BATCH_TIMEOUT_MICROS": "1000",
    "SAGEMAKER_BATCH": "true",
}


MAX_RETRIES = 3  # InvocationsMaxRetries' default: SageMaker's agent retries failed requests


def load_model_server(archive: str | Path):
    from tfbatch.artifact import open_artifact
    from tfbatch.runtime import ModelServer, RuntimeSettings, configure_threads

    settings = RuntimeSettings.from_env({**os.environ, **SAGEMAKER_TFS_ENV})
    configure_threads(settings)
    return ModelServer.from_artifact(open_artifact(str(archive)), settings)


class _TfsHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: the client reuses one connection per thread
    model_server = None
    grpc_port = None  # TF Serving's gRPC port, when the server runs one (GET /grpc-port tells it)

    def log_message(self, *args) -> None:  # one line per image would dominate the run
        pass

    def _reply(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        # Ready once the model is loaded, which it is before the server listens.
        if self.path == "/grpc-port" and self.grpc_port is not None:
            self._reply(200, str(self.grpc_port).encode())
        elif self.path == "/ping" or self.path.startswith("/v1/models/"):
            self._reply(200, b'{"model_version_status": [{"state": "AVAILABLE"}]}')
        else:
            self._reply(404, b'{"error": "not found"}')

    def do_POST(self) -> None:
        from tfbatch.errors import TfbatchError
        from tfbatch.tfs.api import TfsApi

        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        name = self.path.removeprefix("/v1/models/").split(":")[0].split("/")[0]
        try:
            result = TfsApi(self.model_server).predict(json.loads(body), name=name)
            self._reply(200, json.dumps(result).encode())
        except TfbatchError as exc:
            self._reply(exc.status, json.dumps({"error": str(exc)}).encode())
        except Exception as exc:  # noqa: BLE001 - TFS answers 500 with the message too
            self._reply(500, json.dumps({"error": f"{type(exc).__name__}: {exc}"}).encode())


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # listen() backlog: 64 clients connect at once; the default 5 resets some of them.
    request_queue_size = 1024


def serve(archive: str | Path, *, port: int = 0, port_file: str | None = None, server: str = "threaded",
          grpc: bool = False) -> None:
    """Load the model, listen on 127.0.0.1, write the port to ``port_file``, serve until killed.

    ``grpc``: also answer TF Serving's gRPC API (PredictionService) on a port of its own, for a
    container handler that calls ``context.grpc_port`` (its port: ``GET /grpc-port``)."""
    model_server = load_model_server(archive)
    grpc_port = None
    if grpc:
        from tfbatch.tfs.grpc_service import start_grpc_server

        # TF Serving queues calls beyond its threads rather than refusing them: room for the
        # agent's MaxConcurrentTransforms (64) and more
        _grpc_server, grpc_port = start_grpc_server(model_server, host="127.0.0.1", port=0, max_workers=64,
                                                    max_concurrent_rpcs=4096)
    if server == "tfs-app":
        from tfbatch.tfs.loopback import UvicornThread, bind_socket
        from tfbatch.tfs.rest import tfs_app

        sock = bind_socket("127.0.0.1", port)
        bound = sock.getsockname()[1]
        UvicornThread(tfs_app(model_server), sock).start()
        _announce(bound, port_file)
        threading.Event().wait()
        return
    handler = type("Handler", (_TfsHandler,), {"model_server": model_server, "grpc_port": grpc_port})
    httpd = _Server(("127.0.0.1", port), handler)
    _announce(httpd.server_address[1], port_file)
    httpd.serve_forever()


def _announce(port: int, port_file: str | None) -> None:
    if port_file:
        tmp = Path(port_file + ".tmp")
        tmp.write_text(str(port))
        tmp.replace(port_file)
    print(f"listening on 127.0.0.1:{port}", flush=True)


def load_script(archive: str | Path):
    """The artifact's ``code/inference.py``, imported as module ``inference``."""
    with tarfile.open(archive) as tar:
        source = tar.extractfile("code/inference.py").read()
    folder = Path(tempfile.mkdtemp(prefix="tfbatch-bench-code-"))
    try:
        script = folder / "inference.py"
        script.write_bytes(source)
        spec = importlib.util.spec_from_file_location("inference", script)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        shutil.rmtree(folder, ignore_errors=True)  # the module is loaded; its file is not needed
    return module


def run_client(url: str, archive: str | Path, input_dir: str | Path, output_dir: str | Path, *,
               concurrency: int = 64, model_name: str = "model", content_type: str = "application/x-image") -> dict:
    import requests

    from tfbatch.handlers.context import Context

    script = load_script(archive)
    rest_uri = f"{url.rstrip('/')}/v1/models/{model_name}:predict"
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = sorted(p for p in Path(input_dir).iterdir() if p.is_file())
    local = threading.local()
    started = time.monotonic()

    def one(path: Path) -> str | None:
        session = getattr(local, "session", None)
        if session is None:
            session = local.session = requests.Session()
        data = path.read_bytes()
        context = Context(model_name, None, "predict", rest_uri, None, None, None, content_type,
                          "application/json", len(data))
        body = script.input_handler(io.BytesIO(data), context)
        for attempt in range(MAX_RETRIES + 1):
            try:
                response = session.post(rest_uri, data=body, headers={"Content-Type": "application/json"})
                break
            except requests.ConnectionError:
                if attempt == MAX_RETRIES:
                    raise
                session = local.session = requests.Session()
        try:
            result, _ = script.output_handler(response, context)
        except Exception as exc:  # noqa: BLE001 - SageMaker records the failure and moves on
            return f"{path.name}: {exc}"
        (out / (path.name + ".out")).write_bytes(result if isinstance(result, bytes) else result.encode())
        return None

    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="agent") as pool:
        failures = [f for f in pool.map(one, files) if f]
    return {"images": len(files) - len(failures), "failed": failures[:5], "seconds": time.monotonic() - started}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.transform.http_baseline", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--model", required=True, help="model.tar.gz")
    s.add_argument("--port", type=int, default=0)
    s.add_argument("--port-file")
    s.add_argument("--server", choices=["threaded", "tfs-app"], default="threaded")
    s.add_argument("--grpc", action="store_true", help="also serve TF Serving's gRPC API (GET /grpc-port)")
    c = sub.add_parser("client")
    c.add_argument("--url", required=True)
    c.add_argument("--model", required=True, help="model.tar.gz (its code/inference.py runs here)")
    c.add_argument("--input", required=True)
    c.add_argument("--output", required=True)
    c.add_argument("--concurrency", type=int, default=64)
    args = parser.parse_args(argv)
    if args.command == "serve":
        serve(args.model, port=args.port, port_file=args.port_file, server=args.server, grpc=args.grpc)
        return 0
    result = run_client(args.url, args.model, args.input, args.output, concurrency=args.concurrency)
    print(json.dumps(result))
    return 0 if not result["failed"] else 1


if __name__ == "__main__":
    sys.exit(main())
