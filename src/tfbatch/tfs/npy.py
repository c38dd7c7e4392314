"""An opt-in binary answer for predict: ``Accept: application/x-npy`` gets the output as a .npy file.

JSON stays the default and the only format TF Serving and SageMaker's container speak: any
Accept that does not prefer ``application/x-npy`` (see :func:`wants_npy`) gets JSON, as before. A client that
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


def _quality(params: list[str]) -> float:
    q = next((p[2:] for p in params if p.lower().startswith("q=")), "1")
    try:
        return float(q)
    except ValueError:
        return 1.0


def wants_npy(accept: str | None) -> bool:
    """True when the Accept header prefers ``application/x-npy``: listed with a non-zero q, and at
    least as high as any JSON it also accepts (``application/json``, ``application/*``, ``*/*``)."""
    if not accept:
        return False
    npy_q, json_q = 0.0, 0.0
    for item in accept.split(","):
        media, *params = (p.strip() for p in item.split(";"))
        media = media.lower()
        if media == NPY:
            npy_q = max(npy_q, _quality(params))
        elif media in ("application/json", "application/*", "*/*"):
            json_q = max(json_q, _quality(params))
    return npy_q > 0 and npy_q >= json_q


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
