"""The ``context`` argument that SageMaker TFS handler scripts receive.

Field names and order are part of the contract (scripts index it positionally and by name).
"""

from __future__ import annotations

from collections import namedtuple
from typing import Any

from tfbatch.runtime.signature import METHODS

Context = namedtuple(
    "Context",
    [
        "model_name",
        "model_version",
        "method",
        "rest_uri",
        "grpc_port",
        "channel",
        "custom_attributes",
        "request_content_type",
        "accept_header",
        "content_length",
    ],
)



def parse_custom_attributes(header: str | None) -> dict[str, str]:
    """Parse ``X-Amzn-SageMaker-Custom-Attributes``: ``k=v`` pairs separated by commas.

    Unknown keys are kept; only the ``tfs-*`` keys steer routing.
    """
    attrs: dict[str, str] = {}
    if not header:
        return attrs
    for part in header.split(","):
        if "=" in part:
            key, value = part.split("=", 1)
            attrs[key.strip()] = value.strip()
    return attrs


def rest_uri(rest_port: int | None, model_name: str, version: Any, method: str) -> str | None:
    if rest_port is None:
        return None
    version_part = f"/versions/{version}" if version not in (None, "") else ""
    return f"http://localhost:{rest_port}/v1/models/{model_name}{version_part}:{method}"
