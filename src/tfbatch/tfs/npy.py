"""An opt-in binary answer for predict: ``Accept: application/x-npy`` gets the output as a .npy file.

JSON stays the default and the only format TF Serving and SageMaker's container speak: any
Accept that does not name ``application/x-npy`` gets JSON, exactly as before. A client that
asks for .npy gets the one output tensor in NumPy's own file format (a short header with
dtype and shape, then the raw little-endian values), which ``np.load(io.BytesIO(body))``
reads back without a parse: 4 bytes a float32 instead of ~10 bytes of decimal text, no
formatting on the server, no float parsing on the client.

A .npy file holds one array of fixed-size values, so an answer with several outputs, a
string output, or a classify/regress answer cannot be sent this way: 406 Not Acceptable,
naming why and what to ask for instead.
"""

from __future__ import annotations

import io
from collections.abc import Mapping

import numpy as np

from tfbatch.errors import TfbatchError

NPY = "application/x-npy"


class NotAcceptable(TfbatchError):
    status = 406
    grpc_code = "INVALID_ARGUMENT"


def wants_npy(accept: str | None) -> bool:
    """True when the Accept header lists ``application/x-npy`` (with a non-zero q, if one is given)."""
    if not accept:
        return False
    for item in accept.split(","):
        media, *params = (p.strip() for p in item.split(";"))
        if media.lower() != NPY:
            continue
        q = next((p[2:] for p in params if p.lower().startswith("q=")), "1")
        try:
            return float(q) > 0
        except ValueError:
            return True
    return False


def npy_bytes(outputs: Mapping[str, np.ndarray], what: str = "predict") -> bytes:
    """The single output as .npy bytes; NotAcceptable when the answer is not one numeric tensor."""
    if len(outputs) != 1:
        raise NotAcceptable(
            f"Accept: {NPY} carries one tensor, but this {what} answer has outputs {sorted(outputs)}; "
            f"ask for application/json"
        )
    (key, value), = outputs.items()
    arr = np.asarray(value)
    if arr.dtype.kind not in "biufc":
        raise NotAcceptable(
            f"Accept: {NPY} carries numeric tensors, but output {key!r} has dtype {arr.dtype}; "
            f"ask for application/json"
        )
    buf = io.BytesIO()
    np.lib.format.write_array(buf, arr, allow_pickle=False)
    return buf.getvalue()


def not_for(method: str) -> NotAcceptable:
    return NotAcceptable(f"Accept: {NPY} is only answered by predict, not {method}; ask for application/json")
