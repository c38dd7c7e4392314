"""A handler worker process loads what it runs and nothing else: the hooks, the request codecs
and NumPy, but neither the model server nor the environment's settings model (pydantic),
which it never uses. Those were half of its start (benchmarks/transform/profile/worker-imports.md).

Checked in a fresh interpreter, as the pool starts its workers, after the worker has decoded
a CSV and a JSON request and encoded a response: imports made on first use count too.
"""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("pydantic", "pydantic_settings", "tfbatch.settings", "tfbatch.runtime.model_server",
         "tfbatch.runtime.settings", "tensorflow")

WORKER = f'''
import json, sys
import numpy as np
from tfbatch.handlers.pool_worker import Worker
from tfbatch.runtime.signature import SignatureInfo, TensorInfo

sig = SignatureInfo("serving_default", "tensorflow/serving/predict",
                    {{"x": TensorInfo("x", "x:0", "float32", (None, 3))}},
                    {{"y": TensorInfo("y", "y:0", "float32", (None, 2))}})
worker = Worker({{"script": None, "max_image_pixels": 10**7, "grpc_max_message_bytes": 2**20}})
worker.models = {{"model": (1, {{"serving_default": sig}}, "serving_default")}}

def item(body, content_type):
    return (body, content_type, "application/json", None, "model", None, "predict", None, None)

firsts = worker.run("input", [item(b"1,2,3\\n4,5,6\\n", "text/csv"),
                              item(json.dumps({{"instances": [[1, 2, 3]]}}).encode(), "application/json")])
outputs = {{"y": np.zeros((2, 2), np.float32)}}
answer = worker.run("output", [((12, "text/csv", "application/json", None, "model", None, "predict", None, None),
                                 "outputs", (outputs, "row", 1, "serving_default"))])
print(json.dumps({{"firsts": [f[0] for f in firsts], "answer": answer[0][2].decode(),
                  "loaded": [m for m in {HEAVY!r} if m in sys.modules]}}))
'''


def test_a_worker_decodes_and_encodes_without_the_model_server_or_pydantic():
    out = subprocess.run([sys.executable, "-c", WORKER], capture_output=True, text=True, check=True, timeout=120)
    result = json.loads(out.stdout)
    assert result["firsts"] == ["tensors", "tensors"]
    assert json.loads(result["answer"]) == {"predictions": [[0.0, 0.0], [0.0, 0.0]]}
    assert result["loaded"] == []
