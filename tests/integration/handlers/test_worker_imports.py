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
csv = (12, "text/csv", "application/json", None, "model", None, "predict", None, None)
answer = worker.run("output", [(csv, "outputs", (outputs, "row", 1, "serving_default"))])
# The two requests' tensors came back as one run (one array); their answers go back the same way.
run = worker.run("output", [(csv, "outputs-run", ({{"y": np.zeros((3, 2), np.float32)}}, [2, 1], "row", 1, "serving_default")),
                            (csv, "in-run", None)])
print(json.dumps({{"firsts": [f[0] for f in firsts], "sizes": firsts[0][5], "answer": answer[0][2].decode(),
                  "run": [r[2].decode() for r in run],
                  "loaded": [m for m in {HEAVY!r} if m in sys.modules]}}))
'''


def test_a_worker_decodes_and_encodes_without_the_model_server_or_pydantic():
    out = subprocess.run([sys.executable, "-c", WORKER], capture_output=True, text=True, check=True, timeout=120)
    result = json.loads(out.stdout)
    assert result["firsts"] == ["tensors-run", "in-run"] and result["sizes"] == [2, 1]
    assert json.loads(result["answer"]) == {"predictions": [[0.0, 0.0], [0.0, 0.0]]}
    assert [json.loads(r) for r in result["run"]] == [{"predictions": [[0.0, 0.0], [0.0, 0.0]]},
                                                      {"predictions": [[0.0, 0.0]]}]
    assert result["loaded"] == []
