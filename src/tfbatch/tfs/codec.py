"""TF Serving REST JSON <-> numpy tensors for predict (classify/regress: :mod:`tfbatch.tfs.examples`).

Follows TF Serving's json_tensor rules: row format ``{"instances": [...]}`` and columnar
``{"inputs": ...}``; ``{"b64": "..."}`` objects carry bytes into string tensors; outputs
whose key ends in ``_bytes`` are written back as ``{"b64": ...}``. Difference, on purpose:
string outputs that are not valid UTF-8 are also written as b64 (JSON cannot hold them).

Non-finite floats are returned as Python ``nan``/``inf``; ``json.dumps`` writes them as
``NaN``/``Infinity``/``-Infinity``, the same tokens TF Serving emits.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping
from typing import Any

import numpy as np
import orjson

from tfbatch import errors
from tfbatch.runtime.servable import coerce, fits_shape
from tfbatch.runtime import jsonenc
from tfbatch.runtime.signature import SignatureInfo, TensorInfo

ROW = "row"
COLUMNAR = "columnar"
BYTES_SUFFIX = "_bytes"


# ---- predict request -------------------------------------------------------------------


def decode_predict(
    body: Any, sig: SignatureInfo, max_bytes: int | None = None
) -> tuple[dict[str, np.ndarray], str]:
    """Tensors (already in the signature's dtypes) and the request format, "row" or "columnar".

    ``max_bytes`` bounds what the numeric inputs decode to together (``--max-request-mb``, as
    for gRPC), checked from the lists' lengths before any array is made.
    """
    if not isinstance(body, Mapping):
        raise errors.InvalidInput(f"request body must be a JSON object, got {type(body).__name__}")
    has_instances, has_inputs = "instances" in body, "inputs" in body
    if has_instances and has_inputs:
        raise errors.InvalidInput("request must contain only one of 'instances' or 'inputs', not both")
    if has_instances:
        return _decode_rows(body["instances"], sig, max_bytes), ROW
    if has_inputs:
        return _decode_columns(body["inputs"], sig, max_bytes), COLUMNAR
    raise errors.InvalidInput("request is missing the 'instances' or 'inputs' key")


# A body that is nothing but {"instances": <numbers>} or {"inputs": <numbers>}: what a script
# returns for a numeric model (pixels, CSV rows), the commonest request there is.
_NUMERIC_BODY = re.compile(rb'\A\s*\{\s*"(instances|inputs)"\s*:\s*(\[.*\])\s*\}\s*\Z', re.S)
_JSON_SPACE = b" \t\n\r"
_NUMBER_CHARS = b"0123456789eE+-."


def decode_numeric(text: bytes, sig: SignatureInfo, max_bytes: int | None = None):
    """``decode_predict`` of a body of numbers alone, read from its text, or None if it is not one.

    A body ``{"instances": [...]}`` or ``{"inputs": [...]}`` of nested lists of JSON numbers,
    for a signature of one numeric input, becomes its array without a Python list per row:
    its brackets and commas give the shape (checked to be rectangular), and orjson reads the
    numbers as one flat list (so JSON's number grammar is orjson's), which NumPy turns into
    int64 when all are whole and float64 otherwise, as ``np.asarray`` does with the parsed
    lists; ``coerce`` then applies the same dtype and shape rules. Anything else (strings,
    objects, other keys, ragged or empty lists, an integer past int64, text that is not JSON,
    a budget ``max_bytes`` exceeded) gives None, and the body goes the general way, which
    reads it or names what is wrong with it.
    """
    one = _numeric_input(sig)
    if one is None:
        return None
    key, info = one
    found = _NUMERIC_BODY.match(text)
    if found is None:
        return None
    values = found.group(2)
    # The text less its numbers' characters and spaces: brackets and commas alone unless it
    # holds a string, an object or a literal (a tenth of the text, so checked after the cut).
    skeleton = values.translate(None, _NUMBER_CHARS + _JSON_SPACE)
    if skeleton.translate(None, b",[]"):
        return None  # a string, an object, a literal: not numbers alone
    if len(values) <= _SMALL_BODY:
        array = _small_numeric(values, skeleton, info, max_bytes)
        if array is None:
            return None
        return {key: coerce(array, info, sig.name)}, (ROW if found.group(1) == b"instances" else COLUMNAR)
    shape = _skeleton_shape(skeleton)
    if shape is None:
        return None
    count = 1
    for n in shape:
        count *= n
    if max_bytes is not None and count * _itemsize(info.dtype) > max_bytes:
        return None
    if not fits_shape(shape, info):
        # The general way words coerce's error, which names the array's dtype: float64 there,
        # as np.asarray reads the parsed numbers, where these readers put floats straight
        # into a float32 input's dtype.
        return None
    # The brackets dropped, the numbers and commas are a JSON list's insides, unless the text
    # was not JSON ("1 2", "[1,]", "[[],[1]]"), which orjson refuses.
    try:
        flat = orjson.loads(b"[" + values.replace(b"[", b"").replace(b"]", b"") + b"]")
    except orjson.JSONDecodeError:
        return None
    if len(flat) != count:
        return None
    if not _whole(values):
        # Floats (an integer among them too): straight into the input's float dtype, where
        # ``np.array`` would make float64 and ``coerce`` cast it, the same one rounding from
        # each value's double (~85 us less for a 64 x 64 x 3 image's 12,288 numbers).
        array = np.fromiter(flat, _FLOAT_DTYPES.get(info.dtype, np.float64), count)
    else:
        array = np.array(flat)
        if array.dtype.kind != "i":
            return None  # a whole number past int64 (orjson reads it as a float, json as an int)
    return {key: coerce(array.reshape(shape), info, sig.name)}, (ROW if found.group(1) == b"instances" else COLUMNAR)


def decode_numeric_many(texts: list[bytes], sig: SignatureInfo) -> list:
    """``decode_numeric(text, sig)`` of many small bodies, or ``ALONE`` for a text to give to
    ``decode_numeric`` itself.

    A SingleRecord CSV job through a script sends each line as ``{"instances": [[...]]}``: one
    parse, one ``np.array`` and one ``coerce`` a line, each several times the cost of the line's
    numbers. Here the ``"instances"`` bodies of a hop that share a shape (the same brackets and
    commas) and a kind of number (all whole, or none) are read as one JSON list and coerced
    once, and each gets its rows of the result: the values, dtype and shape ``decode_numeric``
    gives it. What could read otherwise alone is left ``ALONE``: a body of another form, a
    larger one, one that keeps its group from parsing or coercing (``_read_together`` tries
    halves of the group again, so the others stay together and that one names its own error),
    and every body where the signature fixes its input's first dimension (a group would pass
    where its members fail).
    """
    out: list = [ALONE] * len(texts)
    one = _numeric_input(sig)
    if one is None:
        return [None] * len(texts)
    key, info = one
    if info.shape is not None and (not info.shape or info.shape[0] is not None):
        return out
    # By kind of number and by count of brackets and commas (a shape's outline: np.array
    # checks the shapes themselves, taking a list of lists only where every member's is alike).
    groups: dict[tuple[bool, int, int], list[tuple[int, bytes]]] = {}
    for n, text in enumerate(texts):
        found = _NUMERIC_BODY.match(text)
        if found is None:
            out[n] = None
            continue
        values = found.group(2)
        if found.group(1) != b"instances" or len(values) > _SMALL_BODY:
            continue
        opened = len(values) - len(values.lstrip(b"[" + _JSON_SPACE))
        if values.count(b"[", 0, opened) > _MAX_DEPTH:  # as decode_numeric's skeleton counts them
            continue
        groups.setdefault((_whole(values), values.count(b"["), values.count(b",")), []).append((n, values))
    for members in groups.values():
        _read_together(members, key, info, sig.name, out)
    return out


def _read_together(members: list[tuple[int, bytes]], key: str, info: TensorInfo, sig_name: str, out: list) -> None:
    """``decode_numeric_many``'s read of one group: on a failure (a body that is not numbers
    alone or not JSON, a shape unlike the others', a value ``coerce`` refuses), each half again,
    so that one odd body leaves the rest together and is itself read alone."""
    if len(members) < 2:
        return
    joined = b"[" + b",".join([v for _, v in members]) + b"]"
    joint = None
    if not joined.translate(None, _NUMBER_CHARS + _JSON_SPACE + b",[]"):  # no string, object or literal
        # The group's members share their kind of number: the joined text's kind is theirs.
        array = _numbers_array(joined)  # None too where the members' shapes differ
        if array is not None:
            rows = array.shape[1]
            try:
                joint = coerce(array.reshape((len(members) * rows, *array.shape[2:])), info, sig_name)
            except errors.TfbatchError:
                pass
    if joint is None:
        half = len(members) // 2
        _read_together(members[:half], key, info, sig_name, out)
        _read_together(members[half:], key, info, sig_name, out)
        return
    for m, (n, _) in enumerate(members):
        out[n] = ({key: joint[m * rows:(m + 1) * rows]}, ROW)


# ``decode_numeric_many``'s word for a body it leaves to ``decode_numeric``.
ALONE = object()


def decode_written(key: str, array: np.ndarray, sig: SignatureInfo, max_bytes: int | None = None):
    """``decode_numeric`` of a body ``{key: ...}`` of numbers alone whose array is known already
    (``jsonenc.written_numbers``: a script's ``json.dumps`` of it, on this thread): the same
    tensors and layout, or None where ``decode_numeric`` gives None."""
    one = _numeric_input(sig)
    if one is None:
        return None
    name, info = one
    if max_bytes is not None and array.size * _itemsize(info.dtype) > max_bytes:
        return None
    if not fits_shape(array.shape, info):
        return None  # as decode_numeric: the general way words the error
    if array.dtype.kind == "f":
        # As ``decode_numeric`` reads floats: each double straight into a float input's dtype.
        dtype = _FLOAT_DTYPES.get(info.dtype)
        if dtype is not None and array.dtype != dtype:
            array = array.astype(dtype)
    return {name: coerce(array, info, sig.name)}, (ROW if key == "instances" else COLUMNAR)


def _numeric_input(sig: SignatureInfo) -> tuple[str, TensorInfo] | None:
    """The signature's one input, unless it has several or takes strings (None)."""
    if len(sig.inputs) != 1:
        return None
    ((key, info),) = sig.inputs.items()
    return None if info.is_string else (key, info)


def _whole(values: bytes) -> bool:
    """Whether a numbers-only text holds whole numbers alone (no fraction, no exponent)."""
    return b"." not in values and b"e" not in values and b"E" not in values


# Input dtypes a body's floats are read into directly (others go through float64 and ``coerce``).
_FLOAT_DTYPES = {"float32": np.float32, "float64": np.float64}


# A body this small (one CSV line's instance) is read as nested lists, which NumPy shapes: the
# skeleton's walk in Python cost more than the parse. Its numbers fit any budget many times over.
_SMALL_BODY = 4096


def _small_numeric(values: bytes, skeleton: bytes, info: TensorInfo, max_bytes: int | None) -> np.ndarray | None:
    """``decode_numeric``'s array for a small body whose ``skeleton`` (its text less numbers and
    spaces) is brackets and commas alone: the same values, shape and dtype, None where that
    reads None (ragged or empty lists, deeper than ``_MAX_DEPTH``, text orjson refuses, a whole
    number past int64, the budget)."""
    if len(skeleton) - len(skeleton.lstrip(b"[")) > _MAX_DEPTH:  # counted without the spaces
        return None
    array = _numbers_array(values)
    if array is None:
        return None
    if max_bytes is not None and array.size * _itemsize(info.dtype) > max_bytes:
        return None
    return array


def _numbers_array(values: bytes) -> np.ndarray | None:
    """``np.array`` of a numbers-only JSON text (nested lists), None where orjson refuses the
    text, the lists are ragged or empty, or the array's kind is not the text's (a whole number
    past int64, which orjson reads as a float)."""
    try:
        array = np.array(orjson.loads(values))
    except (orjson.JSONDecodeError, ValueError):  # not JSON; ragged lists
        return None
    if array.size == 0 or array.dtype.kind != ("i" if _whole(values) else "f"):
        return None
    return array


# Deeper nesting goes the general way, whose parser refuses it by name: each level here builds
# the skeleton of one element, so the work grows with the square of the depth.
_MAX_DEPTH = 32


def _skeleton_shape(skeleton: bytes) -> tuple[int, ...] | None:
    """The shape of nested lists from their brackets and commas alone (``[[,,],[,,]]``: (2, 3)),
    or None unless they are rectangular. An innermost ``[]`` stands for one number here (the
    caller's count of the numbers finds an empty list)."""
    depth = len(skeleton) - len(skeleton.lstrip(b"["))
    if depth == 0 or depth > _MAX_DEPTH:
        return None
    sizes: list[int] = []
    inner = b""  # the skeleton of one element at the level below
    for level in range(depth - 1, -1, -1):
        start = level + 1  # the first group at this level opens at index ``level``
        if level == depth - 1:
            end = skeleton.find(b"]", start)
            count = skeleton.count(b",", start, end) + 1
        else:
            count, at = 1, start + len(inner)
            while skeleton.startswith(b"," + inner, at):
                count, at = count + 1, at + 1 + len(inner)
        sizes.append(count)
        inner = b"[" + b",".join([inner] * count) + b"]"
    shape = tuple(reversed(sizes))
    return shape if inner == skeleton else None


def _is_b64(value: Any) -> bool:
    return isinstance(value, dict) and len(value) == 1 and isinstance(value.get("b64"), str)


def _is_named_object(value: Any) -> bool:
    return isinstance(value, dict) and not _is_b64(value)


# Itemsizes numpy does not know by TensorFlow's name.
_ITEMSIZE = {"bfloat16": 2, "half": 2}


def _itemsize(dtype: str) -> int:
    """Bytes per element of a TensorFlow dtype name (8 where numpy knows no such type)."""
    try:
        return _ITEMSIZE.get(dtype) or np.dtype(dtype).itemsize
    except TypeError:
        return 8


def _check_budget(values: Mapping[str, Any], sig: SignatureInfo, max_bytes: int | None) -> None:
    """Refuse numeric inputs whose nested lists would decode past ``max_bytes`` in total.

    The element count is read along the first element of each level: for rectangular lists
    that is exact, and lists that are longer further on are ragged, which fails on its own
    without a large allocation. String tensors are left out: their bytes are the body's.
    """
    if max_bytes is None:
        return
    total = 0
    for key, value in values.items():
        info = sig.inputs[key]
        if info.is_string:
            continue
        count = 1
        while isinstance(value, list):
            count *= len(value)
            if not value:
                break
            value = value[0]
        total += count * _itemsize(info.dtype)
        if total > max_bytes:
            raise errors.InvalidInput(
                f"input {key!r}: the request's tensors would decode to at least {total} bytes, over the "
                f"limit of {max_bytes} bytes ({max_bytes / 2**20:g} MiB; raise it with --max-request-mb)"
            )


def _decode_rows(instances: Any, sig: SignatureInfo, max_bytes: int | None = None) -> dict[str, np.ndarray]:
    if not isinstance(instances, list):
        raise errors.InvalidInput(f"'instances' must be a list, got {type(instances).__name__}")
    if not instances:
        raise errors.InvalidInput("'instances' is an empty list")
    names = sorted(sig.inputs)
    if _is_named_object(instances[0]):
        columns: dict[str, list[Any]] = {k: [] for k in names}
        for i, inst in enumerate(instances):
            if not _is_named_object(inst):
                raise errors.InvalidInput(f"instance {i}: expected an object like instance 0, got {_kind(inst)}")
            if set(inst) != set(names):
                raise errors.InvalidInput(
                    f"instance {i}: keys {sorted(inst)} must be equal to the inputs of "
                    f"signature {sig.name!r}: {names}"
                )
            for k in names:
                columns[k].append(inst[k])
        _check_budget(columns, sig, max_bytes)
        return {k: _stack(columns[k], sig.inputs[k], sig.name) for k in names}
    if len(names) != 1:
        raise errors.InvalidInput(
            f"'instances' is a plain list, but signature {sig.name!r} has several inputs {names}: "
            f"send a list of objects keyed by input name"
        )
    for i, inst in enumerate(instances):
        if _is_named_object(inst):
            raise errors.InvalidInput(f"instance {i}: expected a value or list like instance 0, got an object")
    _check_budget({names[0]: instances}, sig, max_bytes)
    return {names[0]: _stack(instances, sig.inputs[names[0]], sig.name)}


def _decode_columns(inputs: Any, sig: SignatureInfo, max_bytes: int | None = None) -> dict[str, np.ndarray]:
    names = sorted(sig.inputs)
    if not _is_named_object(inputs):
        if len(names) != 1:
            raise errors.InvalidInput(
                f"'inputs' is a plain value, but signature {sig.name!r} has several inputs {names}: "
                f"send an object keyed by input name"
            )
        _check_budget({names[0]: inputs}, sig, max_bytes)
        return {names[0]: _column(inputs, sig.inputs[names[0]], sig.name)}
    missing = [k for k in names if k not in inputs]
    unknown = sorted(k for k in inputs if k not in sig.inputs)
    if missing or unknown:
        detail = "; ".join(
            p for p in (missing and f"missing {missing}", unknown and f"unknown {unknown}") if p
        )
        raise errors.InvalidInput(
            f"'inputs' object does not match signature {sig.name!r}: {detail}; expected inputs {names}"
        )
    _check_budget({k: inputs[k] for k in names}, sig, max_bytes)
    return {k: _column(inputs[k], sig.inputs[k], sig.name) for k in names}


def _column(value: Any, info: TensorInfo, sig_name: str) -> np.ndarray:
    try:
        return _to_array(value, info, sig_name)
    except _Ragged:  # a client's uneven lists are a bad request, never a 500
        raise errors.InvalidInput(f"'inputs' value for {info.key!r}: nested lists of uneven lengths") from None


def _stack(values: list[Any], info: TensorInfo, sig_name: str) -> np.ndarray:
    """Instances of one input as one array, naming the instance that does not fit."""
    try:
        return _to_array(values, info, sig_name)
    except _Ragged:
        pass
    first = _shape_of(values[0])
    for i, v in enumerate(values):
        shape = _shape_of(v)
        if shape is None:
            raise errors.InvalidInput(f"instance {i} of input {info.key!r}: nested lists of uneven lengths")
        if shape != first:
            raise errors.InvalidInput(
                f"instance {i} of input {info.key!r} has shape {list(shape)}, "
                f"but instance 0 has shape {list(first or ())}: all instances must have the same shape"
            )
    raise errors.InvalidInput(f"input {info.key!r}: nested lists of uneven lengths")


class _Ragged(Exception):
    pass


def _shape_of(value: Any) -> tuple[int, ...] | None:
    """The dense shape of nested lists, or None if ragged."""
    if not isinstance(value, list):
        return ()
    if not value:
        return (0,)
    inner = [_shape_of(v) for v in value]
    if any(s is None or s != inner[0] for s in inner):
        return None
    return (len(value), *inner[0])


def _to_array(value: Any, info: TensorInfo, sig_name: str) -> np.ndarray:
    if info.is_string:
        shape = _shape_of(value)
        if shape is None:
            raise _Ragged()
        flat: list[bytes] = []
        _flatten_bytes(value, info, flat)
        arr = np.empty(len(flat), dtype=object)
        arr[:] = flat
        return coerce(arr.reshape(shape), info, sig_name)
    try:
        arr = np.asarray(value)
    except ValueError:
        raise _Ragged() from None
    if arr.dtype == object:
        _reject_objects(arr, info)
        if _shape_of(value) is None:
            raise _Ragged()
    return coerce(arr, info, sig_name)


def _flatten_bytes(value: Any, info: TensorInfo, out: list[bytes]) -> None:
    if isinstance(value, list):
        for v in value:
            _flatten_bytes(v, info, out)
    elif isinstance(value, str):
        out.append(value.encode("utf-8"))
    elif _is_b64(value):
        out.append(_b64decode(value["b64"], info.key))
    else:
        raise errors.InvalidInput(
            f"input {info.key!r}: expected a string or {{\"b64\": ...}} for a string tensor, got {_kind(value)}"
        )


def _reject_objects(arr: np.ndarray, info: TensorInfo) -> None:
    """A b64 object (or any object) inside a numeric tensor is an error worth naming."""
    for v in arr.flat:
        if isinstance(v, dict):
            what = "{\"b64\": ...} (binary data)" if _is_b64(v) else "a JSON object"
            raise errors.InvalidInput(
                f"input {info.key!r} has dtype {info.dtype}, but received {what}; "
                f"b64 values are only accepted for string tensors"
            )


def strict_b64decode(text: str) -> bytes:
    """binascii's strict decoder: refuses everything ``b64decode(validate=True)`` refuses, and more."""
    return binascii.a2b_base64(text, strict_mode=True)


def _pick_b64decode():
    """pybase64's SIMD decoder (a 22 KB JPEG: 4 us against the standard library's 60), else
    binascii's strict one.

    Both refuse everything ``b64decode(validate=True)`` refuses; they refuse a little more
    (pybase64: padding after a whole quantum), and a value they refuse is decided by the
    standard library. So which one is installed changes the speed, never an answer.
    """
    try:
        import pybase64
    except ImportError:
        return strict_b64decode
    return lambda text: pybase64.b64decode(text, validate=True)


fast_b64decode = _pick_b64decode()


def _b64decode(text: str, key: str) -> bytes:
    try:
        return fast_b64decode(text)
    except (binascii.Error, ValueError):
        pass  # refused: the standard library decides (it accepts a little more)
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise errors.InvalidInput(f"input {key!r}: value of 'b64' is not valid base64") from None


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), type(value).__name__
    )


# ---- predict response ------------------------------------------------------------------


def encode_predict(
    outputs: Mapping[str, np.ndarray],
    fmt: str,
    sig: SignatureInfo | None = None,
    *,
    shortest_floats: bool = False,
    native: bool = False,
) -> dict[str, Any]:
    """The TF Serving response body for ``outputs``: ``{"predictions": ...}`` or ``{"outputs": ...}``.

    ``shortest_floats`` writes float32 values with their shortest round-trip decimal (as TF
    Serving does) at roughly twice the encoding time; the default writes the exact float64
    value of each float32, which parses back to the same float32.
    """
    if not outputs:
        raise errors.ModelError("the model returned no outputs")
    keys = sorted(outputs)
    if fmt == COLUMNAR:
        if len(keys) == 1:
            return {"outputs": to_json_value(outputs[keys[0]], keys[0], shortest_floats, native)}
        return {"outputs": {k: to_json_value(outputs[k], k, shortest_floats, native) for k in keys}}
    if fmt != ROW:
        raise ValueError(f"unknown format {fmt!r}")
    arrays = {k: np.asarray(outputs[k]) for k in keys}
    sizes = {k: (a.shape[0] if a.ndim else None) for k, a in arrays.items()}
    if any(s is None for s in sizes.values()) or len(set(sizes.values())) > 1:
        raise errors.ModelError(
            "outputs must share a leading batch dimension to be returned as 'predictions', got "
            + ", ".join(f"{k}: {list(arrays[k].shape)}" for k in keys)
            + "; send the request in columnar format ('inputs') instead"
        )
    if len(keys) == 1:
        return {"predictions": to_json_value(arrays[keys[0]], keys[0], shortest_floats, native)}
    columns = [_column_rows(arrays[k], k, shortest_floats, native) for k in keys]
    return {"predictions": [dict(zip(keys, row)) for row in zip(*columns)]}


def encode_predict_bodies(outputs: Mapping[str, np.ndarray], sizes: list[int], fmt: str) -> list[bytes] | None:
    """The response body of each of several requests answered by one model call, in one
    encode: what ``jsonenc.dumps(encode_predict(part, fmt, native=True))`` gives each request's
    ``sizes[i]`` rows, or None where this cannot tell (the caller then encodes each alone).

    Taken: outputs of one or two dimensions sharing the batch dimension, of booleans, integers
    or finite float16/32/64 (what ``jsonenc.native_array`` hands orjson as it is), every
    request one row or more. orjson writes each number alone, so the text of a whole output,
    cut at its row bounds, holds each request's text: ``[[a,b],[c,d]]`` splits at ``],[``,
    ``[a,b,c]`` at commas. With several outputs (a classifier's ``classes`` and
    ``probabilities``) each row's object, or each request's columns, is put together from
    those cuts in the codec's key order.
    """
    if not outputs or fmt not in (ROW, COLUMNAR) or not sizes or min(sizes) < 1:
        return None
    total = sum(sizes)
    keys = sorted(outputs)
    cuts = []
    for key in keys:
        cut = _row_texts(outputs[key], total)
        if cut is None:
            return None
        cuts.append(cut)
    bodies: list[bytes] = []
    at = 0
    if len(keys) == 1:
        ((parts, sep, left, right),) = cuts
        head = (b'{"predictions":' if fmt == ROW else b'{"outputs":') + left
        right += b"}"
        for size in sizes:
            bodies.append(head + sep.join(parts[at:at + size]) + right)
            at += size
        return bodies
    names = [orjson.dumps(key) + b":" for key in keys]
    if fmt == COLUMNAR:  # {"outputs": {key: the request's rows of that output, ...}}
        for size in sizes:
            columns = [name + left + sep.join(parts[at:at + size]) + right
                       for name, (parts, sep, left, right) in zip(names, cuts)]
            bodies.append(b'{"outputs":{' + b",".join(columns) + b"}}")
            at += size
        return bodies
    # {"predictions": [{key: the row's value, ...} per row]}: a 2-D output's row in brackets.
    values = [parts if sep == b"," else [b"[" + part + b"]" for part in parts] for parts, sep, _, _ in cuts]
    rows = [b"{" + b",".join(name + value for name, value in zip(names, row)) + b"}" for row in zip(*values)]
    for size in sizes:
        bodies.append(b'{"predictions":[' + b",".join(rows[at:at + size]) + b"]}")
        at += size
    return bodies


def _row_texts(arr: np.ndarray, rows: int) -> tuple[list[bytes], bytes, bytes, bytes] | None:
    """One output's text cut per row: (each row's text, the separator, the opening and closing
    brackets), or None where orjson's text of it cannot be cut (``encode_predict_bodies``)."""
    arr = np.asarray(arr)
    if arr.ndim not in (1, 2) or arr.shape[0] != rows or arr.ndim == 2 and arr.shape[1] == 0:
        return None
    # What the per-request encode hands orjson as it is (float16 widened to float32); None or a
    # fragment (NaN/Infinity, TF Serving's tokens) leaves each request to its own encode.
    arr = jsonenc.native_array(arr)
    if type(arr) is not np.ndarray:
        return None
    text = orjson.dumps(arr, option=orjson.OPT_SERIALIZE_NUMPY)
    if arr.ndim == 2:
        parts, sep, left, right = text[2:-2].split(b"],["), b"],[", b"[[", b"]]"
    else:
        parts, sep, left, right = text[1:-1].split(b","), b",", b"[", b"]"
    if len(parts) != rows:
        return None
    return parts, sep, left, right


def _column_rows(arr: np.ndarray, key: str, shortest_floats: bool, native: bool) -> Any:
    """One output's values, indexable by row (to be zipped with the other outputs' rows)."""
    value = to_json_value(arr, key, shortest_floats, native)
    if isinstance(value, orjson.Fragment):  # non-finite floats: one text for the whole array, not per row
        return [to_json_value(row, key, shortest_floats, native) for row in arr]
    return value


def to_json_value(arr: np.ndarray, key: str = "", shortest_floats: bool = False, native: bool = False) -> Any:
    """Nested lists of JSON-ready Python values (``tolist`` does the work in C), or with
    ``native`` the numpy array itself where :mod:`~tfbatch.runtime.jsonenc` can write it."""
    arr = np.asarray(arr)
    kind = arr.dtype.kind
    # TensorFlow's numpy bfloat16 (ml_dtypes, kind "V"): exact as float32, as TF Serving writes
    # it. The kind first: ``dtype.name`` is computed in Python, ~2 us a call, once per request.
    if kind == "V" and arr.dtype.name == "bfloat16":
        arr = arr.astype(np.float32)
        kind = "f"
    if native:
        fast = jsonenc.native_array(arr)
        if fast is not None:
            return fast
        if arr.ndim == 0 and kind == "f" and not np.isfinite(arr):
            # orjson writes a bare nan as null; TF Serving writes NaN / Infinity / -Infinity.
            return orjson.Fragment(json.dumps(float(arr)).encode())
    if kind == "f":
        if shortest_floats and arr.dtype.itemsize < 8:
            # numpy prints the shortest repr that round-trips the float32; reading it back as
            # float64 gives a Python float whose repr is that short string.
            return arr.astype(str).astype(np.float64).tolist()
        return arr.astype(np.float64, copy=False).tolist()
    if kind in "biu":
        return arr.tolist()
    if kind == "c":
        return np.stack([arr.real, arr.imag], axis=-1).tolist()
    if kind in "SUO":
        as_b64 = key.endswith(BYTES_SUFFIX)
        flat = [_encode_string(v, as_b64) for v in arr.reshape(-1).tolist()]
        if arr.ndim == 0:
            return flat[0]
        out = np.empty(len(flat), dtype=object)
        out[:] = flat
        return out.reshape(arr.shape).tolist()
    raise errors.ModelError(f"output {key!r} has dtype {arr.dtype}, which JSON cannot represent")


def _encode_string(value: Any, as_b64: bool) -> Any:
    if isinstance(value, str):
        value = value.encode("utf-8")
    if not isinstance(value, bytes):
        return value
    if not as_b64:
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            pass
    return {"b64": base64.b64encode(value).decode("ascii")}
