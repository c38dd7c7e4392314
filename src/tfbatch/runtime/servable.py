"""One loaded SavedModel version, run in-process with TF Serving's input checks.

Signature descriptions (method names, tensor names, dtypes, shapes) come from the
MetaGraphDef in ``saved_model.pb`` — the same place TF Serving reads them — because
``tf.saved_model.load`` does not expose ``method_name``. Execution goes through the
loaded concrete functions.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from tfbatch import errors
from tfbatch.runtime.signature import SignatureInfo, TensorInfo

log = logging.getLogger(__name__)

DEFAULT_SIGNATURE = "serving_default"
SERVE_TAG = "serve"


def read_signatures(path: str | Path) -> dict[str, SignatureInfo]:
    """SignatureInfo for every signature of the ``serve`` MetaGraph in ``path``/saved_model.pb."""
    from tfbatch.runtime.tf_import import import_tensorflow

    tf = import_tensorflow()  # the first TensorFlow import of a process, usually: without Keras
    from tensorflow.core.protobuf import saved_model_pb2

    pb = Path(path) / "saved_model.pb"
    try:
        saved = saved_model_pb2.SavedModel()
        saved.ParseFromString(pb.read_bytes())
    except (OSError, Exception) as exc:  # noqa: BLE001 - DecodeError has no stable import path
        raise errors.ArtifactError(f"cannot read SavedModel {pb}: {exc}") from None
    metas = list(saved.meta_graphs)
    if not metas:
        raise errors.ArtifactError(f"SavedModel {pb} has no MetaGraph")
    meta = next((m for m in metas if SERVE_TAG in m.meta_info_def.tags), metas[0])

    def info(key: str, proto: Any) -> TensorInfo:
        dtype = tf.dtypes.as_dtype(proto.dtype).name if proto.dtype else "invalid"
        shape = None
        if not proto.tensor_shape.unknown_rank:
            shape = tuple(None if d.size < 0 else int(d.size) for d in proto.tensor_shape.dim)
        return TensorInfo(key=key, tensor_name=proto.name, dtype=dtype, shape=shape)

    sigs = {}
    for name, sd in meta.signature_def.items():
        if name.startswith("__"):  # __saved_model_init_op and friends are not callable signatures
            continue
        sigs[name] = SignatureInfo(
            name=name,
            method_name=sd.method_name,
            inputs={k: info(k, v) for k, v in sorted(sd.inputs.items())},
            outputs={k: info(k, v) for k, v in sorted(sd.outputs.items())},
        )
    return sigs


def tf_error_message(exc: BaseException) -> str:
    """TF's own message without the 'Graph execution error' and node-trace noise."""
    text = getattr(exc, "message", None) or str(exc)
    keep = []
    for line in text.splitlines():
        s = line.strip()
        if (
            not s
            or s.startswith(("Graph execution error", "Detected at node", "[[", "File \""))
            or s == "<stack traces unavailable>"
        ):
            continue
        keep.append(s)
    msg = " ".join(keep) or text.strip()
    return re.sub(r"\s*\[Op:[^\]]*\]\s*$", "", msg)


class Servable:
    """A loaded model version. Thread-safe: TF concrete functions may be called concurrently."""

    def __init__(self, name: str, version: int, path: Path, loaded: Any, signatures: dict[str, SignatureInfo]):
        self.name = name
        self.version = version
        self.path = path
        self.signatures = signatures
        self._loaded = loaded
        self._functions: dict[str, Any] = {}
        self._lock = threading.Lock()
        # Set when the ModelServer unloads this version; requests that resolved it earlier
        # still finish on it, outside its (closed) batchers.
        self.retired = False
        if DEFAULT_SIGNATURE in signatures:
            self.default_signature = DEFAULT_SIGNATURE
        elif signatures:
            self.default_signature = next(iter(sorted(signatures)))
        else:
            raise errors.ArtifactError(f"model {name!r} version {version} at {path} has no signatures")

    @classmethod
    def load(cls, name: str, version: int, path: str | Path) -> Servable:
        from tfbatch.runtime.tf_import import import_tensorflow

        tf = import_tensorflow()

        path = Path(path)
        if not (path / "saved_model.pb").is_file():
            raise errors.ArtifactError(
                f"model {name!r} version {version}: no saved_model.pb in {path}"
            )
        signatures = read_signatures(path)
        try:
            loaded = tf.saved_model.load(str(path), tags=[SERVE_TAG])
        except Exception as exc:  # noqa: BLE001 - report any loader failure as an artifact problem
            raise errors.ArtifactError(
                f"cannot load model {name!r} version {version} from {path}: {tf_error_message(exc)}"
            ) from None
        # Only signatures the loader can call are served.
        callable_names = set(loaded.signatures.keys())
        signatures = {k: v for k, v in signatures.items() if k in callable_names}
        log.info("loaded model %s version %s from %s (signatures: %s)", name, version, path, sorted(signatures))
        return cls(name, int(version), path, loaded, signatures)

    def __repr__(self) -> str:
        return f"Servable({self.name!r}, version={self.version}, path={str(self.path)!r})"

    def signature(self, signature_name: str | None = None) -> SignatureInfo:
        """The named signature (None or "" -> the default one); NotFound lists the others."""
        key = signature_name or self.default_signature
        sig = self.signatures.get(key)
        if sig is None:
            raise errors.NotFound(
                f"signature {key!r} not found in model {self.name!r} version {self.version}; "
                f"available signatures: {', '.join(sorted(self.signatures))}"
            )
        return sig

    def prepare_inputs(self, signature_name: str | None, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """Check keys, convert dtypes safely and check shapes; InvalidInput says what is wrong."""
        sig = self.signature(signature_name)
        expected = set(sig.inputs)
        got = set(inputs)
        if got != expected:
            missing = sorted(expected - got)
            unknown = sorted(got - expected)
            parts = []
            if missing:
                parts.append(f"missing inputs {missing}")
            if unknown:
                parts.append(f"unknown inputs {unknown}")
            raise errors.InvalidInput(
                f"signature {sig.name!r} of model {self.name!r}: {'; '.join(parts)}; "
                f"expected inputs {sorted(expected)}"
            )
        return {k: coerce(inputs[k], sig.inputs[k], sig.name) for k in sig.inputs}

    def run(self, signature_name: str | None, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """Run one batch through a signature; outputs as numpy (strings as object arrays of bytes)."""
        sig = self.signature(signature_name)
        return self.run_prepared(sig.name, self.prepare_inputs(sig.name, inputs))

    def run_prepared(self, signature_name: str, arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run inputs already passed through :meth:`prepare_inputs` (the batcher's entry)."""
        import tensorflow as tf

        fn = self._function(signature_name)
        try:
            result = fn(**{k: tf.convert_to_tensor(v) for k, v in arrays.items()})
        except tf.errors.InvalidArgumentError as exc:
            # Raised by ops on the request's content (undecodable image, failed assert, ...).
            raise errors.InvalidInput(
                f"model {self.name!r} signature {signature_name!r}: {tf_error_message(exc)}"
            ) from None
        except Exception as exc:  # noqa: BLE001 - anything else is the model's failure
            raise errors.ModelError(
                f"model {self.name!r} signature {signature_name!r} failed: "
                f"{type(exc).__name__}: {tf_error_message(exc)}"
            ) from None
        return {k: _to_numpy(v) for k, v in result.items()}

    def _function(self, signature_name: str) -> Any:
        fn = self._functions.get(signature_name)
        if fn is None:
            with self._lock:
                fn = self._functions.setdefault(signature_name, self._loaded.signatures[signature_name])
        return fn


def _to_numpy(value: Any) -> np.ndarray:
    arr = value.numpy() if hasattr(value, "numpy") else np.asarray(value)
    return np.asarray(arr)


_NUMERIC_KINDS = "biuf"


def coerce(value: Any, info: TensorInfo, signature_name: str) -> np.ndarray:
    """``value`` as an array of ``info``'s dtype, refusing lossy or meaningless conversions.

    Allowed: same dtype; int/uint -> any float; int -> another int when every value fits;
    float -> wider or narrower float; str/bytes only into string tensors.
    """
    arr = value if isinstance(value, np.ndarray) else _as_array(value)

    def fail(reason: str = "") -> errors.InvalidInput:
        got = f"{_dtype_name(arr)} with shape {list(arr.shape)}"
        msg = (
            f"input {info.key!r} of signature {signature_name!r}: expected dtype {info.dtype} "
            f"with shape {info.shape_str()}, got {got}"
        )
        return errors.InvalidInput(msg + (f" ({reason})" if reason else ""))

    if not fits_shape(arr.shape, info):
        raise fail()
    if info.is_string:
        if arr.dtype.kind in "SU":
            return arr.astype(object) if arr.dtype.kind == "S" else _encode_str(arr)
        if arr.dtype == object:
            if all(isinstance(v, bytes) for v in arr.flat):
                return arr
            if all(isinstance(v, (bytes, str)) for v in arr.flat):
                return _encode_str(arr)
        raise fail("only str or bytes values fit a string tensor")
    target = _np_dtype(info.dtype)
    if target is None:
        raise fail(f"dtype {info.dtype} is not supported by the runtime")
    if arr.dtype == target:
        return arr
    kind = arr.dtype.kind
    if arr.dtype == object:
        try:
            arr = np.array(arr.tolist())
        except (ValueError, TypeError):
            raise fail() from None
        kind = arr.dtype.kind
    if kind not in _NUMERIC_KINDS:
        raise fail()
    tkind = "f" if info.dtype == "bfloat16" else target.kind
    if tkind == "b":
        if kind != "b":
            raise fail("only booleans fit a bool tensor")
    elif tkind in "iu":
        if kind == "f":
            raise fail("floating-point values do not convert to integers without loss")
        if kind in "iu" and arr.size:
            lo, hi = np.iinfo(target).min, np.iinfo(target).max
            if arr.min() < lo or arr.max() > hi:
                raise fail(f"values outside the range of {info.dtype}")
    elif tkind == "c":
        pass
    elif tkind == "f" and kind == "b":
        raise fail("booleans do not convert to floats")
    return arr.astype(target)


def fits_shape(shape: tuple[int, ...], info: TensorInfo) -> bool:
    """Whether an array of ``shape`` passes ``coerce``'s shape check for ``info`` (its rank, and
    every dimension the signature fixes)."""
    expected = info.shape
    return expected is None or (len(shape) == len(expected) and all(
        d is None or d == n for d, n in zip(expected, shape)))


def _as_array(value: Any) -> np.ndarray:
    if isinstance(value, (bytes, str)):
        return np.array(value, dtype=object)
    try:
        return np.asarray(value)
    except ValueError:  # ragged nested lists
        return np.asarray(value, dtype=object)


def _encode_str(arr: np.ndarray) -> np.ndarray:
    out = np.empty(arr.shape, dtype=object)
    flat = out.reshape(-1)
    for i, v in enumerate(arr.reshape(-1)):
        flat[i] = v.encode("utf-8") if isinstance(v, str) else v
    return out


def _dtype_name(arr: np.ndarray) -> str:
    if arr.dtype.kind in "SUO":
        return "string" if arr.dtype.kind != "O" else "object"
    return arr.dtype.name


def _np_dtype(name: str) -> np.dtype | None:
    if name == "bfloat16":
        # numpy has no bfloat16; TensorFlow's own (ml_dtypes, a TensorFlow dependency) is the
        # one tf.constant takes as DT_BFLOAT16. float32 -> bfloat16 rounds to nearest even.
        try:
            import ml_dtypes
        except ImportError:
            return None
        return np.dtype(ml_dtypes.bfloat16)
    try:
        return np.dtype(name)
    except TypeError:
        return None
