"""TF Serving's classify and regress JSON: ``{"examples": [...], "context": {...}}`` in, as
serialized ``tf.train.Example`` protos, and ``{"results": ...}`` out.

Difference from TF Serving, on purpose: a feature mixing ints and floats becomes a float list
instead of an error. Values follow the predict codec's rules for b64 and non-finite floats.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from tfbatch import errors
from tfbatch.tfs.codec import _b64decode, _is_b64, _kind, to_json_value

def decode_examples(body: Any) -> np.ndarray:
    """Serialized tf.train.Example protos (object array of bytes) from a classify/regress body."""
    from tensorflow.core.example import example_pb2

    if not isinstance(body, Mapping):
        raise errors.InvalidInput(f"request body must be a JSON object, got {type(body).__name__}")
    examples = body.get("examples")
    if examples is None:
        raise errors.InvalidInput("request is missing the 'examples' key")
    if not isinstance(examples, list) or not examples:
        raise errors.InvalidInput("'examples' must be a non-empty list of objects")
    context = body.get("context")
    base = example_pb2.Example()
    if context is not None:
        _fill_example(base, context, "context")
    out = np.empty(len(examples), dtype=object)
    for i, ex in enumerate(examples):
        proto = example_pb2.Example()
        proto.CopyFrom(base)
        _fill_example(proto, ex, f"example {i}")
        out[i] = proto.SerializeToString()
    return out


def _fill_example(proto: Any, features: Any, where: str) -> None:
    if not isinstance(features, Mapping):
        raise errors.InvalidInput(f"{where}: must be a JSON object of features, got {_kind(features)}")
    fmap = proto.features.feature
    for name, value in features.items():
        values = value if isinstance(value, list) else [value]
        feature = fmap[name]
        feature.Clear()
        kinds = {_feature_kind(v, name, where) for v in values}
        if kinds == {"int", "float"}:
            kinds = {"float"}
        if len(kinds) > 1:
            raise errors.InvalidInput(
                f"{where}: feature {name!r} mixes value types {sorted(kinds)}; a feature holds one type"
            )
        kind = kinds.pop() if kinds else "float"
        if kind == "bytes":
            feature.bytes_list.value.extend(
                v.encode("utf-8") if isinstance(v, str) else _b64decode(v["b64"], name) for v in values
            )
        elif kind == "int":
            try:
                feature.int64_list.value.extend(int(v) for v in values)
            except ValueError:
                raise errors.InvalidInput(f"{where}: feature {name!r} has an integer outside int64") from None
        else:
            feature.float_list.value.extend(float(v) for v in values)


def _feature_kind(value: Any, name: str, where: str) -> str:
    if isinstance(value, bool) or isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str) or _is_b64(value):
        return "bytes"
    raise errors.InvalidInput(
        f"{where}: feature {name!r} has an element of unexpected JSON type: {_kind(value)}"
    )


def encode_classify(outputs: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """``{"results": [[[label, score], ...], ...]}`` from ``classes`` and/or ``scores`` outputs."""
    classes = outputs.get("classes")
    scores = outputs.get("scores")
    if classes is None and scores is None:
        raise errors.ModelError(
            f"classify signature returned neither 'classes' nor 'scores' (got {sorted(outputs)})"
        )
    ref = scores if scores is not None else classes
    n = len(ref)
    k = 1 if np.ndim(ref) == 1 else ref.shape[1]

    def as_2d(arr: np.ndarray, what: str) -> np.ndarray:
        arr = np.asarray(arr)
        arr = arr.reshape(n, 1) if arr.ndim == 1 else arr
        if arr.ndim != 2 or arr.shape != (n, k):
            raise errors.ModelError(f"classify output {what!r} has shape {list(arr.shape)}, expected [{n}, {k}]")
        return arr

    labels = (
        [[_label(v) for v in row] for row in as_2d(classes, "classes").tolist()]
        if classes is not None
        else [[""] * k for _ in range(n)]
    )
    values = to_json_value(as_2d(scores, "scores"), "scores") if scores is not None else [[0.0] * k for _ in range(n)]
    return {"results": [[[lab, sc] for lab, sc in zip(lr, sr)] for lr, sr in zip(labels, values)]}


def _label(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def encode_regress(outputs: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """``{"results": [v, ...]}`` from the ``outputs`` tensor ([N] or [N, 1])."""
    values = outputs.get("outputs")
    if values is None:
        if len(outputs) != 1:
            raise errors.ModelError(f"regress signature must return 'outputs', got {sorted(outputs)}")
        values = next(iter(outputs.values()))
    arr = np.asarray(values)
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr[:, 0]
    if arr.ndim != 1:
        raise errors.ModelError(f"regress output has shape {list(arr.shape)}, expected [N] or [N, 1]")
    return {"results": to_json_value(arr, "outputs")}

