"""Plain descriptions of SavedModel signatures, independent of TensorFlow objects."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

PREDICT_METHOD = "tensorflow/serving/predict"
CLASSIFY_METHOD = "tensorflow/serving/classify"
REGRESS_METHOD = "tensorflow/serving/regress"
# The verbs of TF Serving's REST API and of the ``tfs-method`` custom attribute.
METHODS = tuple(m.rsplit("/", 1)[-1] for m in (PREDICT_METHOD, CLASSIFY_METHOD, REGRESS_METHOD))

# numpy-style dtype name -> TensorFlow DataType enum name (as TF Serving's metadata prints it)
TF_DTYPE_NAMES = {
    "float16": "DT_HALF", "bfloat16": "DT_BFLOAT16", "float32": "DT_FLOAT", "float64": "DT_DOUBLE",
    "int8": "DT_INT8", "int16": "DT_INT16", "int32": "DT_INT32", "int64": "DT_INT64",
    "uint8": "DT_UINT8", "uint16": "DT_UINT16", "uint32": "DT_UINT32", "uint64": "DT_UINT64",
    "bool": "DT_BOOL", "string": "DT_STRING", "complex64": "DT_COMPLEX64",
    "complex128": "DT_COMPLEX128",
}


@dataclass(frozen=True)
class TensorInfo:
    """One input or output of a signature. ``shape`` None means unknown rank."""

    key: str
    tensor_name: str
    dtype: str
    shape: tuple[int | None, ...] | None

    @property
    def is_string(self) -> bool:
        return self.dtype == "string"

    def shape_str(self) -> str:
        """TF Serving style: [-1, 3] (unknown dims as -1), [?] for unknown rank."""
        if self.shape is None:
            return "[?]"
        return "[" + ", ".join("-1" if d is None else str(d) for d in self.shape) + "]"

    def to_tfs(self) -> dict[str, Any]:
        """The TensorInfo JSON TF Serving's metadata endpoint returns."""
        if self.shape is None:
            shape: dict[str, Any] = {"dim": [], "unknown_rank": True}
        else:
            shape = {
                "dim": [{"size": str(-1 if d is None else d), "name": ""} for d in self.shape],
                "unknown_rank": False,
            }
        return {
            "dtype": TF_DTYPE_NAMES.get(self.dtype, "DT_INVALID"),
            "tensor_shape": shape,
            "name": self.tensor_name,
        }


@dataclass(frozen=True)
class SignatureInfo:
    name: str
    method_name: str
    inputs: dict[str, TensorInfo]
    outputs: dict[str, TensorInfo]

    def to_tfs(self) -> dict[str, Any]:
        return {
            "inputs": {k: v.to_tfs() for k, v in self.inputs.items()},
            "outputs": {k: v.to_tfs() for k, v in self.outputs.items()},
            "method_name": self.method_name,
        }
