"""Default request handling when there is no ``code/inference.py`` (COMPAT §3), plus images.

JSON, JSON Lines and CSV bodies become TFS REST request bodies exactly as the SageMaker
container builds them. Beyond the container, image bodies (JPEG/PNG bytes) work with no
script: straight into a string input, or decoded and resized for an image-tensor input.

Batch jobs send MultiRecord payloads of thousands of CSV rows or JSON lines, so the parse is
most of their CPU. Bulk paths keep it in C without changing any answer:
:func:`table_tensors` turns a plain numeric CSV body straight into the float tensor the
general path would build (no Python object per cell), and :func:`json_request` parses a JSON
body, or every line of a JSON Lines body in one C loop, with orjson. Each checks, before it
answers, that its input is one the general path reads the same way, and otherwise hands the
body to the general path, which alone ever reports an error, so an error reads as before.
"""

from __future__ import annotations

import csv
import io
import json
import re
from typing import Any

import numpy as np
import orjson

from tfbatch.errors import InvalidInput, UnsupportedMediaType
from tfbatch.records.imagedecode import ImageTarget, decoder_for
from tfbatch.records.images import DEFAULT_MAX_IMAGE_PIXELS, check_image
from tfbatch.records.payloads import ASCII_LINE_BREAKS, UTF8_LINE_BREAKS
from tfbatch.runtime import jsonenc

JSON_TYPES = ("application/json",)
JSONLINES_TYPES = ("application/jsonlines", "application/jsonl", "application/x-jsonlines")
CSV_TYPES = ("text/csv",)
# GIF and BMP content types are still routed here so that such bodies get a clear "not
# accepted" error naming the format, rather than "Unsupported Media Type".
IMAGE_TYPES = ("application/x-image", "image/png", "image/jpeg", "image/jpg", "image/gif", "image/bmp", "image/webp")

_PASS_THROUGH_KEYS = ("instances", "inputs", "examples")
# How the container tells JSON Lines sent as application/json (what a MultiRecord job's payload
# of JSON lines is): an object or array, only whitespace, then another; unless the body names
# one of the TFS request keys, which goes to TF Serving as it is (tensorflowServing.js,
# is_tfs_json before is_json_lines). Such a body is one instance per line, as JSON Lines.
_TFS_KEYS_MARK = re.compile(rb'"(' + "|".join(_PASS_THROUGH_KEYS).encode() + rb')"\s*:')
_JSON_LINES_MARK = re.compile(rb"[}\]]\s*[\[{]")


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
    # int() never takes a ".", "e" or "E" (base 10): such a cell goes straight to float(), as the
    # ValueError int() raised for it cost 7x the parse itself (a 1 MB body of floats with one
    # text cell, the general path: 106 -> 15 ms).
    if "." not in text and "e" not in text and "E" not in text:
        try:
            return int(text)
        except ValueError:
            pass
    try:
        return float(text)
    except ValueError:
        return text


# Bytes that break a line for str.splitlines() (the general JSON Lines path) besides "\n":
# bodies holding any are left to it ("\r\n" is turned into "\n" first). The multi-byte ones
# can only be in a body that is not ASCII.
# What a plain numeric CSV body is made of: no quotes, spaces, letters (nan, inf), or "_".
_CSV_NUMERIC = b"0123456789.eE+-,\n\r"
_EXACT_INTEGERS = 2.0 ** 53  # below this, every integer is exactly a float64
_INTEGER_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")


def _json_lines_bulk(body: bytes) -> list | None:
    """Each non-empty line of a JSON Lines body parsed by orjson, or None when the general
    path must read it (another line break, a long integer, a line orjson refuses).

    For the inputs it accepts, orjson builds the same values as ``json.loads`` (see
    :func:`tfbatch.runtime.jsonenc.fast_loads`).
    """
    if b"\r\n" in body:
        body = body.replace(b"\r\n", b"\n")
    if any(mark in body for mark in ASCII_LINE_BREAKS) or jsonenc.has_long_digits(body):
        return None
    if not body.isascii() and any(mark in body for mark in UTF8_LINE_BREAKS):
        return None
    lines = body.split(b"\n")
    if not all(lines):
        lines = [line for line in lines if line]
    try:
        return list(map(orjson.loads, lines))
    except orjson.JSONDecodeError:
        return None  # a bad line, or whitespace only: the general path reads or names it


def table_tensors(body: bytes, content_type: str | None, signature) -> dict[str, np.ndarray] | None:
    """The input tensor the general path (:func:`json_request`, then the codec's
    ``decode_predict``) builds for a plain numeric CSV body, without a Python object per cell;
    None when the body or the signature is outside what this reads exactly the same way.

    Only a signature with one float32/float64 input, and only a body of digits, ``.eE+-``,
    commas and ``\n`` (``\r\n`` too), every row with the same number of cells, no empty
    line. Cells are parsed by NumPy's text reader, which converts a number with the same
    correctly rounded routine as ``float()``; the general path's integer cells become the
    same float64 (checked: below 2**53; an integer ``-0`` is ``int("-0") == 0`` there, so ``0.0``).
    Or a signature with one integer input (ids, counts, categories) and a body of integers
    only (no ``.eE``): read as int64, as ``np.asarray`` makes the general path's ``int()``
    cells (NumPy's reader takes the same ``+5``, ``007`` and ``-0``, and refuses a value past
    int64), then the same ``coerce`` to the input's dtype. Anything else (quotes, blanks,
    text, NaN, ragged rows, a bad cell) returns None, and the general path answers, with its
    error if there is one.
    """
    if media_type(content_type) not in CSV_TYPES or len(signature.inputs) != 1:
        return None
    (key, info), = signature.inputs.items()
    integers = info.dtype in _INTEGER_DTYPES
    if not (integers or info.dtype in ("float32", "float64")) or not body or body.translate(None, _CSV_NUMERIC):
        return None
    if integers and (b"." in body or b"e" in body or b"E" in body):
        return None  # a float cell: the general path refuses it for an integer input, by name
    if b"\r" in body:
        body = body.replace(b"\r\n", b"\n")
        if b"\r" in body:
            return None  # a lone "\r" ends a row for the csv module
    if body.startswith(b"\n") or b"\n\n" in body:
        return None  # empty lines are skipped there; keep the row count simple here
    text = body.decode("ascii")
    rows = text.count("\n") + (not text.endswith("\n"))
    first = text[:text.find("\n")] if "\n" in text else text
    columns = first.count(",") + 1
    if text.count(",") != rows * (columns - 1):
        return None
    try:
        array = np.loadtxt(io.StringIO(text), delimiter=",", dtype=np.int64 if integers else np.float64,
                           comments=None, ndmin=2, quotechar=None)
    except (ValueError, OverflowError):
        return None  # a ragged row, an empty or malformed cell: the general path names it
    if array.shape != (rows, columns) or not array.size:
        return None
    if not integers:
        if not np.abs(array).max() < _EXACT_INTEGERS:
            return None
        negative_zero = np.signbit(array) & (array == 0)
        if negative_zero.any():
            _integer_zeros(text, array, negative_zero)
    if columns == 1:
        array = array.reshape(rows)  # one-column rows are scalars there
    from tfbatch.runtime.servable import coerce

    try:
        return {key: coerce(array, info, signature.name)}
    except Exception:  # noqa: BLE001 - e.g. a shape the signature refuses: the general path says so
        return None


def _integer_zeros(text: str, array: np.ndarray, negative_zero: np.ndarray) -> None:
    """``-0`` as an integer cell is ``int("-0") == 0`` on the general path, a float ``-0.0``
    stays negative: set the integer ones to ``0.0`` (few rows, looked at one by one)."""
    lines = text.split("\n")
    for row, column in zip(*np.nonzero(negative_zero)):
        cell = lines[row].split(",")[column]
        if not any(mark in cell for mark in ".eE"):
            array[row, column] = 0.0


def _as_request(value: Any) -> dict:
    if isinstance(value, dict) and any(k in value for k in _PASS_THROUGH_KEYS):
        return value
    if isinstance(value, list) and value and isinstance(value[0], list):
        # A body that opens with two brackets is already the list of instances: the container's
        # rule (tensorflowServing.js generic_json_request), and what a client sends for an array
        # with a batch dimension (the SageMaker SDK's JSONSerializer of a 2-D or deeper numpy
        # array). Any other value is one instance.
        return {"instances": value}
    return {"instances": [value]}


def _json_lines(body: bytes, what: str) -> list:
    """One value per non-blank line of a UTF-8 ``body``; a bad line is named by its number."""
    bulk = _json_lines_bulk(body)
    if bulk is not None:
        return bulk
    instances = []
    for n, line in enumerate(_decode_text(body, what).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            instances.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise InvalidInput(f"{what} body line {n} is not valid JSON: {exc}") from exc
        except RecursionError:
            raise InvalidInput(f"{what} body line {n} nests arrays/objects too deeply") from None
    return instances


def json_request(body: bytes, content_type: str | None) -> dict:
    """Turn a JSON / JSON Lines / CSV body into a TFS REST request body."""
    mt = media_type(content_type)
    if mt in JSON_TYPES:
        # orjson where it reads the body as json would (4x faster on a body of floats), else
        # the general path, which alone reports errors.
        value = jsonenc.fast_loads(body)
        if value is not jsonenc.UNREAD:
            return _as_request(value)
        try:
            value = json.loads(_decode_text(body, "application/json"))
        except json.JSONDecodeError as exc:
            if _JSON_LINES_MARK.search(body) and not _TFS_KEYS_MARK.search(body):
                return {"instances": _json_lines(body, "application/json")}
            raise InvalidInput(f"application/json body is not valid JSON: {exc}") from exc
        except RecursionError:  # a hostile body of nested brackets: the client's fault, not a 500
            raise InvalidInput("application/json body nests arrays/objects too deeply") from None
        return _as_request(value)
    if mt in JSONLINES_TYPES:
        _decode_text(body, mt)  # the same UTF-8 check and error first
        return {"instances": _json_lines(body, mt)}
    if mt in CSV_TYPES:
        rows = csv.reader(io.StringIO(_decode_text(body, "text/csv")))
        try:
            instances = [[_csv_value(cell.strip()) for cell in row] for row in rows if any(c.strip() for c in row)]
        except csv.Error as exc:  # e.g. a field past the csv module's limit, an unclosed quote at a NUL
            raise InvalidInput(f"text/csv body is not CSV the default handling can read (row "
                               f"{rows.line_num}: {exc}); expected rows of values, each field at most "
                               f"{csv.field_size_limit():,} characters") from exc
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
