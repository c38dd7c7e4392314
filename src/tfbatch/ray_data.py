"""A Ray Data callable class that runs a model artifact (SavedModel + inference.py) on batches.

    import ray, tfbatch.ray_data
    ds = ray.data.read_binary_files("s3://bucket/images/")
    out = ds.map_batches(tfbatch.ray_data.Predictor, fn_constructor_kwargs={
        "model_data": "s3://bucket/model.tar.gz", "content_type": "application/x-image"},
        concurrency=2, batch_size=64)

Each row is one record, exactly as a Batch Transform record: its body goes through the same
stack as ``tfbatch transform`` and ``tfbatch serve`` (the script's handlers with the same
``context``, default JSON/CSV/image handling without one, loopback TFS endpoints for scripts
that call them). The rows of a batch are invoked concurrently, so the model sees them as one
batch. A failed row does not fail the batch: its ``error`` column says why (``raise_errors=True``
fails the Ray task instead, and Ray's own task retries take over).
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Mapping

import numpy as np

from tfbatch.errors import InvalidInput, TfbatchError

_DEFAULT_COLUMNS = ("bytes", "data", "body", "image")


class Predictor:
    """``ds.map_batches(Predictor, fn_constructor_kwargs={"model_data": ...})``.

    ``model_data``: model.tar.gz or model folder (path or URI). ``input_column``: the column
    holding each record (default: the first of bytes/data/body/image that exists, or the only
    column). Bytes and str values are request bodies as they are; any other value (an image
    array, a list) is sent as ``{"instances": [value]}`` JSON. Adds ``output_column`` (the
    response body: str for JSON/text responses, bytes otherwise) and ``error``.
    """

    def __init__(self, model_data: str, *, content_type: str | None = None, accept: str = "application/json",
                 input_column: str | None = None, output_column: str = "output",
                 custom_attributes: str | None = None, env: Mapping[str, str] | None = None,
                 max_concurrency: int = 64, raise_errors: bool = False):
        from tfbatch.handlers.stack import build_stack

        self._stack = build_stack(str(model_data), env=env)
        self.content_type = content_type
        self.accept = accept
        self.input_column = input_column
        self.output_column = output_column
        self.custom_attributes = custom_attributes
        self.raise_errors = raise_errors
        self._pool = ThreadPoolExecutor(max_workers=max_concurrency, thread_name_prefix="tfbatch-ray-data")

    def _column(self, batch: Mapping[str, Any]) -> str:
        if self.input_column is not None:
            if self.input_column not in batch:
                raise InvalidInput(f"input_column '{self.input_column}' is not in the batch (columns: "
                                   f"{', '.join(batch)})")
            return self.input_column
        for name in _DEFAULT_COLUMNS:
            if name in batch:
                return name
        if len(batch) == 1:
            return next(iter(batch))
        raise InvalidInput(f"cannot tell which column holds the records ({', '.join(batch)}); pass input_column")

    def _request(self, value: Any):
        from tfbatch.handlers.service import InvocationRequest

        if isinstance(value, (bytes, bytearray, np.bytes_)):
            body, default_type = bytes(value), "application/x-image"
        elif isinstance(value, str):
            body, default_type = value.encode(), "application/json"
        else:
            instance = value.tolist() if isinstance(value, np.ndarray) else value
            body, default_type = json.dumps({"instances": [instance]}).encode(), "application/json"
        return InvocationRequest(body=body, content_type=self.content_type or default_type, accept=self.accept,
                                 custom_attributes=self.custom_attributes)

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        """Invoke every row of ``batch`` (numpy or pandas batch format) and add the output columns."""
        as_pandas = hasattr(batch, "to_dict") and hasattr(batch, "columns")
        column = self._column(batch)
        values = list(batch[column])
        responses = list(self._pool.map(lambda v: self._stack.service.invoke(self._request(v)), values))
        outputs: list[Any] = []
        errors: list[str | None] = []
        for resp in responses:
            if not resp.ok:
                message = resp.body.decode("utf-8", "replace")
                if self.raise_errors:
                    raise TfbatchError(f"record failed with status {resp.status}: {message}")
                outputs.append(None)
                errors.append(message)
                continue
            textual = resp.content_type.startswith(("application/json", "text/", "application/jsonlines"))
            outputs.append(resp.body.decode("utf-8") if textual else resp.body)
            errors.append(None)
        if as_pandas:
            batch = batch.copy()
            batch[self.output_column] = outputs
            batch["error"] = errors
            return batch
        out = dict(batch)
        out[self.output_column] = np.array(outputs, dtype=object)
        out["error"] = np.array(errors, dtype=object)
        return out

    def close(self) -> None:
        """Release the model and the loopback endpoints (Ray calls nothing on teardown; GC does)."""
        stack, self._stack = getattr(self, "_stack", None), None
        if stack is not None:
            self._pool.shutdown(wait=False)
            stack.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
