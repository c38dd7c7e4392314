"""SageMaker Runtime's InvokeEndpoint: the request, forwarded to the endpoint's serve process.

The serve process answers ``POST /invocations`` exactly as ``tfbatch serve`` does (it *is*
``tfbatch serve``), so handler semantics, content types and custom attributes are the same by
construction. What this module adds is AWS's outer shape: the endpoint and variant looked up,
``x-Amzn-Invoked-Production-Variant`` on the answer, and a model's non-2xx answer turned into
the 424 ModelError with OriginalStatusCode, OriginalMessage and LogStreamArn that boto3 raises
as ``client.exceptions.ModelError``.

The hop itself is :meth:`EndpointProcess.post` (kept-alive loopback connections).
"""

from __future__ import annotations

import http.client
from typing import Any

from tfbatch.apiserver.endpoint_workers import ENDPOINT, LOG_GROUP, EndpointWorkers
from tfbatch.apiserver.endpoints import COMPONENT
from tfbatch.apiserver.protocol import ApiError
from tfbatch.apiserver.registry import Context, operation

class ModelError(ApiError):
    """424 ModelError: its body carries the model's status and answer besides the message."""

    def __init__(self, message: str, fields: dict[str, Any]):
        super().__init__("ModelError", message, 424)
        self.fields = fields

    def body(self) -> dict[str, Any]:
        return {**super().body(), **self.fields}


def _not_available(ctx: Context, name: str) -> ApiError:
    doc = ctx.state.get(ENDPOINT, name)
    if doc is None:
        return ApiError("ValidationError", f"Endpoint {name} of account {ctx.account} not found.", 400)
    return ApiError("ValidationError", f"Endpoint {name} of account {ctx.account} is not in service "
                    f"(status {doc['EndpointStatus']}).", 400)


def _model_error(ctx: Context, endpoint: str, variant: str, status: int, payload: bytes) -> ModelError:
    kind = "client" if status < 500 else "server"
    original = payload.decode("utf-8", "replace")
    group = f"{LOG_GROUP}/{endpoint}"
    message = (f'Received {kind} error ({status}) from {variant} with message "{original}". '
               f"See the log group {group} (DescribeLogStreams/GetLogEvents on this server) for more information.")
    return ModelError(message, {"OriginalStatusCode": status, "OriginalMessage": original,
                                "LogStreamArn": f"arn:aws:logs:{ctx.region}:{ctx.account}:log-group:{group}"})


@operation("sagemaker-runtime", "InvokeEndpoint")
def invoke_endpoint(ctx: Context, params: dict) -> dict:
    name = params["EndpointName"]
    workers: EndpointWorkers = ctx.components[COMPONENT]
    try:
        proc, variant = workers.acquire(name, params.get("TargetVariant"))
    except LookupError:
        raise _not_available(ctx, name) from None
    except KeyError:
        raise ApiError("ValidationError", f"Endpoint {name} has no production variant "
                       f"{params.get('TargetVariant')!r}.", 400) from None
    headers = {"Content-Type": params.get("ContentType") or "application/json",
               "Accept": params.get("Accept") or "application/json"}
    if params.get("CustomAttributes") is not None:
        headers["X-Amzn-SageMaker-Custom-Attributes"] = params["CustomAttributes"]
    try:
        status, content_type, attributes, payload = proc.post("/invocations", params.get("Body") or b"", headers)
    except (OSError, http.client.HTTPException) as exc:
        raise ApiError("ServiceUnavailable", f"Endpoint {name}'s model server did not answer: "
                       f"{type(exc).__name__}: {exc}", 503) from None
    finally:
        proc.release()
    if not 200 <= status < 300:
        raise _model_error(ctx, name, variant, status, payload)
    return {"Body": payload, "ContentType": content_type or "application/json",
            "InvokedProductionVariant": variant, "CustomAttributes": attributes}
