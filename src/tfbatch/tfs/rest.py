"""TF Serving's REST API (COMPAT §4) over a ModelServer, as Starlette routes.

``POST /v1/models/<name>[/versions/<v>]:predict|:classify|:regress``,
``GET /v1/models/<name>[/versions/<v>]`` (status) and ``GET .../metadata``.

The ``:method`` suffix lives inside the last path segment, which Starlette's path
converters cannot express, so one catch-all route parses the rest of the path itself.
Model calls block (TensorFlow, the batcher's futures): JSON decoding, the call and JSON
encoding all run in the thread pool so the event loop keeps serving other requests. A
response holding a large array is encoded in chunks and sent with chunked transfer
(:mod:`tfbatch.tfs.streaming`), byte for byte the JSON a single encode would give.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tfbatch.errors import InvalidInput, NotFound, TfbatchError, from_exception
from tfbatch.runtime import jsonenc
from tfbatch.runtime.signature import METHODS
from tfbatch.tfs.api import TfsApi
from tfbatch.tfs import codec, jsonstream, npy
from tfbatch.tfs.blocking import Limiters, run_blocking
from tfbatch.tfs.streaming import streamed

log = logging.getLogger(__name__)

PREFIX = "/v1/models/"
JSON = "application/json"


@dataclass(frozen=True)
class TfsTarget:
    """What a TFS REST path names."""

    name: str
    version: int | None
    action: str  # predict | classify | regress | status | metadata


def parse_path(path: str, http_method: str) -> TfsTarget:
    """``/v1/models/m/versions/2:predict`` -> TfsTarget("m", 2, "predict")."""
    if not path.startswith(PREFIX):
        raise NotFound(f"no route for {path}")
    rest = path[len(PREFIX):]
    action = "status"
    if http_method == "POST":
        rest, sep, verb = rest.rpartition(":")
        if not sep or verb not in METHODS:
            raise NotFound(
                f"POST {path}: expected /v1/models/<name>[/versions/<version>]:predict|:classify|:regress"
            )
        action = verb
    elif rest.endswith("/metadata"):
        rest, action = rest[: -len("/metadata")], "metadata"
    parts = rest.split("/")
    if len(parts) == 1 and parts[0]:
        return TfsTarget(parts[0], None, action)
    if len(parts) == 3 and parts[0] and parts[1] == "versions":
        return TfsTarget(parts[0], parse_version(parts[2]), action)
    raise NotFound(f"{http_method} {path}: expected /v1/models/<name>[/versions/<version>][/metadata]")


def parse_version(text: str) -> int:
    try:
        version = int(text)
    except ValueError:
        raise InvalidInput(f"model version must be an integer, got '{text}'") from None
    if version < 0:
        raise InvalidInput(f"model version must be non-negative, got {version}")
    return version


def error_response(err: TfbatchError) -> Response:
    return Response(err.to_json(), status_code=err.status, media_type=JSON)


def json_bytes(value: Any) -> bytes:
    return jsonenc.dumps(value)


def decode_json_object(body: bytes, what: str) -> dict:
    if not body:
        raise InvalidInput(f"{what}: request body is empty; expected a JSON object")
    try:
        value = jsonenc.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"{what}: request body is not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise InvalidInput(f"{what}: request body must be a JSON object, got {type(value).__name__}")
    return value


def call_model_server(model_server: Any, target: TfsTarget, body: bytes) -> bytes | jsonstream.Plan:
    """The blocking part of one TFS REST request: decode, run, encode (or plan the encoding)."""
    api = TfsApi(model_server)
    if target.action in ("status", "metadata"):
        fn = api.status if target.action == "status" else api.metadata
        return json_bytes(fn(target.name, target.version))
    if target.action == "predict":
        found = api.numeric_predict(body, target.name, target.version)
        if found is not None:  # a body of numbers alone, read without a Python object per number
            outputs, fmt, sig = found
            return jsonstream.encode(codec.encode_predict(outputs, fmt, sig, native=True))
    request = decode_json_object(body, f":{target.action}")
    return jsonstream.encode(api.call(target.action, request, target.name, target.version))


def call_for_npy(model_server: Any, target: TfsTarget, body: bytes) -> bytes:
    """A ``:predict`` whose client asked for ``Accept: application/x-npy`` (tfbatch.tfs.npy)."""
    if target.action != "predict":
        raise npy.not_for(target.action)
    api = TfsApi(model_server)
    found = api.numeric_predict(body, target.name, target.version)
    if found is None:
        found = api.predict_arrays(decode_json_object(body, ":predict"), target.name, target.version)
    return npy.npy_bytes(found[0])


class TfsRestEndpoint:
    """The ASGI-side handler: parse the path, hop to a thread, map errors to ``{"error": ...}``."""

    def __init__(self, model_server: Any, limiters: Limiters | None = None, json_helpers: Any = None):
        self.model_server = model_server
        self.limiters = limiters or Limiters()
        self.json_helpers = json_helpers

    async def handle(self, request: Request) -> Response:
        try:
            target = parse_path(request.url.path, request.method)
            body = await request.body() if request.method == "POST" else b""
            limiter = self.limiters["tfs"]
            if request.method == "POST" and npy.wants_npy(request.headers.get("accept")):
                content = await run_blocking(call_for_npy, self.model_server, target, body, limiter=limiter)
                return Response(content, media_type=npy.NPY)
            content = await run_blocking(call_model_server, self.model_server, target, body, limiter=limiter)
            if isinstance(content, jsonstream.Plan):
                return streamed(content, media_type=JSON, limiter=limiter, helpers=self.json_helpers)
            return Response(content, media_type=JSON)
        except TfbatchError as err:
            return error_response(err)
        except Exception as exc:  # a worker must survive whatever a request does
            log.exception("TFS REST request %s %s failed", request.method, request.url.path)
            return error_response(from_exception(exc))


def tfs_routes(model_server: Any, limiters: Limiters | None = None, json_helpers: Any = None) -> list[Route]:
    endpoint = TfsRestEndpoint(model_server, limiters, json_helpers)
    return [Route("/v1/models/{rest:path}", endpoint.handle, methods=["GET", "POST"], name="tfs")]


def tfs_app(model_server: Any) -> Starlette:
    """A standalone app with only the TFS routes (the loopback endpoint for handler scripts)."""
    return Starlette(routes=tfs_routes(model_server))
