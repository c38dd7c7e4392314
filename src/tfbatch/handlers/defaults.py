"""Default request handling when there is no ``code/inference.py`` (COMPAT §3), plus images.

JSON, JSON Lines and CSV bodies become TFS REST request bodies exactly as the SageMaker
container builds them. Beyond the container, image bodies (JPEG/PNG bytes) work with no
script: straight into a string input, or decoded and resized for an image-tensor input.
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import numpy as np

from tfbatch.errors import InvalidInput, UnsupportedMediaType
from tfbatch.records.imagedecode import ImageTarget, decoder_for
from tfbatch.records.images import DEFAULT_MAX_IMAGE_PIXELS, check_image

JSON_TYPES = ("application/json",)
JSONLINES_TYPES = ("application/jsonlines", "application/jsonl", "application/x-jsonlines")
CSV_TYPES = ("text/csv",)
# GIF and BMP content types are still routed here so that such bodies get a clear "not
# accepted" error naming the format, rather than "Unsupported Media Type".
IMAGE_TYPES = ("application/x-image", "image/png", "image/jpeg", "image/jpg", "image/gif", "image/bmp", "image/webp")

_PASS_THROUGH_KEYS = ("instances", "inputs", "examples")


def media_type(content_type: str | None) -> str:
    """``"Application/JSON; charset=utf-8"`` -> ``"application/json"``; empty -> JSON (container default)."""
    if not content_type:
        return "application/json"
    return content_type.split(";", 1)[0].strip().lower()


def is_image(content_type: str | None) -> bool:
    return media_type(content_type) in IMAGE_TYPES


def _decode_text(body: bytes, what: str) -> str:
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{what} body is not valid UTF-8 text: {exc}") from exc


def _csv_value(text: str) -> Any:
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def json_request(body: bytes, content_type: str | None) -> dict:
    """Turn a JSON / JSON Lines / CSV body into a TFS REST request body."""
    mt = media_type(content_type)
    if mt in JSON_TYPES:
        try:
            value = json.loads(_decode_text(body, "application/json"))
        except json.JSONDecodeError as exc:
            raise InvalidInput(f"application/json body is not valid JSON: {exc}") from exc
        except RecursionError:  # a hostile body of nested brackets: the client's fault, not a 500
            raise InvalidInput("application/json body nests arrays/objects too deeply") from None
        if isinstance(value, dict) and any(k in value for k in _PASS_THROUGH_KEYS):
            return value
        return {"instances": [value]}
    if mt in JSONLINES_TYPES:
        instances = []
        for n, line in enumerate(_decode_text(body, mt).splitlines(), start=1):
            if not line.strip():
                continue
            try:
                instances.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise InvalidInput(f"{mt} body line {n} is not valid JSON: {exc}") from exc
            except RecursionError:
                raise InvalidInput(f"{mt} body line {n} nests arrays/objects too deeply") from None
        return {"instances": instances}
    if mt in CSV_TYPES:
        rows = csv.reader(io.StringIO(_decode_text(body, "text/csv")))
        instances = [[_csv_value(cell.strip()) for cell in row] for row in rows if any(c.strip() for c in row)]
        # A one-column CSV gives scalars, as the container does for single-feature rows.
        instances = [row[0] if len(row) == 1 else row for row in instances]
        return {"instances": instances}
    raise UnsupportedMediaType(f"Unsupported Media Type: {content_type}")


def image_inputs(body: bytes, signature, max_pixels: int = DEFAULT_MAX_IMAGE_PIXELS) -> dict[str, np.ndarray]:
    """Tensors for an image body: raw bytes for a string input, else a decoded, resized image.

    ``signature`` is a runtime SignatureInfo with exactly one input. The header is checked
    first either way (JPEG or PNG, within ``max_pixels``): a model that decodes in its graph
    must not be handed a decompression bomb any more than our own decoder. An image tensor
    input gets the image through :mod:`tfbatch.records.imagedecode` (TensorFlow ops, off the
    GIL; its docstring states the resize rule).
    """
    check_image(body, max_pixels)
    if len(signature.inputs) != 1:
        raise InvalidInput(
            f"an image body needs a signature with one input; signature '{signature.name}' takes "
            f"{sorted(signature.inputs)}: send JSON, or add code/inference.py"
        )
    (key, info), = signature.inputs.items()
    if info.dtype == "string":
        return {key: np.array([body], dtype=object)}
    target = ImageTarget.of(info, signature.name)
    array = decoder_for(target, max_pixels).decode_one(body)
    return {key: array if len(info.shape) == 4 else array[0]}
