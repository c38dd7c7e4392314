"""What ``saved_model_cli show --all`` prints, read from the protobuf without loading the model.

Parsing ``saved_model.pb`` needs only TensorFlow's generated protobuf classes, so inspecting
a multi-gigabyte model takes as long as reading its graph file, and no variables, devices
or ops are touched.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tfbatch.errors import ArtifactError, DependencyMissing
from tfbatch.artifact.discover import Artifact, open_artifact
from tfbatch.runtime.signature import TF_DTYPE_NAMES

# TF's saved_model_cli hides this one too: it is the restore op, not a servable signature.
_INIT_SIGNATURE = "__saved_model_init_op"
_SERVE_TAG = "serve"

# DataType enum name -> the numpy-style name users know (tf.as_dtype(...).name): the inverse of
# the runtime's table, plus the types no serving input has but a listing may show.
_DTYPE_NAMES = {enum: name for name, enum in TF_DTYPE_NAMES.items()} | {
    "DT_RESOURCE": "resource", "DT_VARIANT": "variant", "DT_QINT8": "qint8", "DT_QUINT8": "quint8",
    "DT_QINT16": "qint16", "DT_QUINT16": "quint16", "DT_QINT32": "qint32",
}


def _protos():
    try:
        from google.protobuf import text_format
        from tensorflow.core.framework import types_pb2
        from tensorflow.core.protobuf import saved_model_pb2
    except ImportError as exc:
        raise DependencyMissing(
            f"inspecting a SavedModel needs TensorFlow's protobuf classes ({exc}); "
            "pip install tfbatch[cpu] or tfbatch[gpu]"
        ) from None
    return saved_model_pb2, types_pb2, text_format


def read_saved_model(path: str | os.PathLike):
    """Parse ``saved_model.pb`` (or ``.pbtxt``) in the folder ``path`` into a SavedModel proto."""
    saved_model_pb2, _, text_format = _protos()
    path = Path(path)
    pb, pbtxt = path / "saved_model.pb", path / "saved_model.pbtxt"
    msg = saved_model_pb2.SavedModel()
    try:
        if pb.is_file():
            msg.ParseFromString(pb.read_bytes())
        elif pbtxt.is_file():
            text_format.Parse(pbtxt.read_text(encoding="utf-8"), msg)
        else:
            raise ArtifactError(f"'{path}' holds no saved_model.pb or saved_model.pbtxt")
    except ArtifactError:
        raise
    except Exception as exc:  # DecodeError, ParseError, UnicodeDecodeError: all mean "corrupt"
        raise ArtifactError(f"cannot parse the SavedModel in '{path}': {type(exc).__name__}: {exc}") from None
    return msg


def _tensor(info, types_pb2) -> dict[str, Any]:
    enum = types_pb2.DataType.Name(info.dtype) if info.dtype in types_pb2.DataType.values() else str(info.dtype)
    encoding = info.WhichOneof("encoding")
    if encoding == "coo_sparse":
        name = info.coo_sparse.values_tensor_name
    elif encoding == "composite_tensor":
        name = None
    else:
        name = info.name
    shape = None
    if info.HasField("tensor_shape") and not info.tensor_shape.unknown_rank:
        shape = [int(d.size) for d in info.tensor_shape.dim]
    out = {
        "name": name,
        "dtype": _DTYPE_NAMES.get(enum, enum.removeprefix("DT_").lower()),
        "dtype_enum": enum,
        "shape": shape,
    }
    if encoding not in (None, "name"):
        out["encoding"] = encoding
    return out


def _meta_graph_info(meta, types_pb2) -> dict[str, Any]:
    signatures = {}
    for key in sorted(meta.signature_def):
        if key == _INIT_SIGNATURE:
            continue
        sig = meta.signature_def[key]
        signatures[key] = {
            "method_name": sig.method_name,
            "inputs": {k: _tensor(sig.inputs[k], types_pb2) for k in sorted(sig.inputs)},
            "outputs": {k: _tensor(sig.outputs[k], types_pb2) for k in sorted(sig.outputs)},
        }
    return {"tags": sorted(meta.meta_info_def.tags), "signatures": signatures}


def inspect_saved_model(path: str | os.PathLike) -> dict[str, Any]:
    """Tags and signatures of the SavedModel in ``path``.

    TF Serving loads the meta graph tagged ``serve``; that one is reported. ``tag_sets``
    lists every meta graph's tags so a model exported without ``serve`` is easy to spot.
    """
    _, types_pb2, _ = _protos()
    msg = read_saved_model(path)
    if not msg.meta_graphs:
        raise ArtifactError(f"the SavedModel in '{path}' has no meta graph")
    chosen = next((m for m in msg.meta_graphs if _SERVE_TAG in m.meta_info_def.tags), msg.meta_graphs[0])
    info = {"path": str(path), **_meta_graph_info(chosen, types_pb2)}
    info["tag_sets"] = [sorted(m.meta_info_def.tags) for m in msg.meta_graphs]
    return info


def inspect_artifact(artifact: Artifact | str | os.PathLike) -> dict[str, Any]:
    """JSON-able description of every model, version and signature, plus the user code present.

    ``artifact`` may be an Artifact or anything open_artifact accepts; an archive opened here
    is extracted into a temporary folder, deleted before this returns.
    """
    if isinstance(artifact, Artifact):
        return _describe(artifact)
    opened = open_artifact(artifact)
    try:
        return _describe(opened)
    finally:
        opened.cleanup()


def _describe(artifact: Artifact) -> dict[str, Any]:
    models: dict[str, Any] = {}
    for name, entry in artifact.models.items():
        models[name] = {
            "latest": entry.latest,
            "versions": {str(v): inspect_saved_model(p) for v, p in entry.versions.items()},
        }
    return {
        "root": str(artifact.root),
        "default_model": artifact.default_model_name,
        "models": models,
        "code": {
            "inference_script": artifact.inference_script is not None,
            "requirements": artifact.requirements is not None,
            "lib": artifact.lib_dir is not None,
        },
    }


def _shape_text(shape: list[int] | None) -> str:
    return "unknown rank" if shape is None else "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def _tensor_lines(kind: str, tensors: dict[str, Any]) -> list[str]:
    lines = [f"      {kind}:"]
    if not tensors:
        lines.append("        (none)")
    for key, t in tensors.items():
        lines.append(f"        {key}: {t['dtype']} ({t['dtype_enum']}) shape {_shape_text(t['shape'])}  name: {t['name']}")
    return lines


def format_inspect(info: dict[str, Any]) -> str:
    """Human-readable listing of ``inspect_artifact``'s result."""
    lines: list[str] = []
    for name, model in info["models"].items():
        default = " (default)" if name == info.get("default_model") else ""
        versions = ", ".join(model["versions"])
        lines.append(f"Model '{name}'{default}: versions {versions}; latest {model.get('latest', '?')}")
        for v, ver in model["versions"].items():
            lines.append(f"  Version {v}: {ver['path']}")
            lines.append(f"    tags: {', '.join(ver['tags']) or '(none)'}")
            if not ver["signatures"]:
                lines.append("    (no signatures)")
            for sig_name, sig in ver["signatures"].items():
                lines.append(f"    signature '{sig_name}' method {sig['method_name']}")
                lines.extend(_tensor_lines("inputs", sig["inputs"]))
                lines.extend(_tensor_lines("outputs", sig["outputs"]))
    code = info.get("code", {})
    yes = lambda flag: "yes" if code.get(flag) else "no"  # noqa: E731
    lines.append(
        f"Code: inference.py {yes('inference_script')}, requirements.txt {yes('requirements')}, lib/ {yes('lib')}"
    )
    return "\n".join(lines) + "\n"
