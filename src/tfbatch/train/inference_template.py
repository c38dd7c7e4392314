"""The ``code/inference.py`` shipped with exported image classifiers.

It follows the SageMaker TFS container's handler contract (input_handler /
output_handler), so the same artifact runs unchanged in that container, in
``tfbatch serve`` and in ``tfbatch transform``. Image bodies become TFS REST
``{"instances": [{"b64": ...}]}`` requests for the model's ``serving_default``
signature, which decodes the bytes in-graph. Only the standard library is used,
so no ``requirements.txt`` is needed.
"""

from __future__ import annotations

from pathlib import Path

INFERENCE_SCRIPT = '''\
"""Pre/post-processing for an image classifier served by TensorFlow Serving.

input_handler: an encoded image (PNG/JPEG) becomes one base64 instance; JSON passes through.
output_handler: the TFS response JSON is returned as it is; errors are raised.
"""

import base64
import json

IMAGE_CONTENT_TYPES = ("application/x-image", "image/png", "image/jpeg", "image/jpg")
JSON_CONTENT_TYPES = ("application/json", "application/jsonlines")


def _media_type(content_type):
    return (content_type or "application/json").split(";")[0].strip().lower()


def input_handler(data, context):
    content_type = _media_type(context.request_content_type)
    body = data.read()
    if content_type in IMAGE_CONTENT_TYPES:
        encoded = base64.b64encode(body).decode("utf-8")
        return json.dumps({"instances": [{"b64": encoded}]})
    if content_type in JSON_CONTENT_TYPES:
        return body.decode("utf-8") if isinstance(body, bytes) else body
    raise ValueError(
        "Unsupported content type {!r}: expected one of {}".format(
            context.request_content_type, ", ".join(IMAGE_CONTENT_TYPES + JSON_CONTENT_TYPES)
        )
    )


def output_handler(response, context):
    if response.status_code != 200:
        raise ValueError(response.content.decode("utf-8", errors="replace"))
    return response.content, "application/json"
'''


def write_inference_script(code_dir: str | Path) -> Path:
    """Write ``<code_dir>/inference.py`` and return its path."""
    directory = Path(code_dir)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "inference.py"
    path.write_text(INFERENCE_SCRIPT)
    return path
