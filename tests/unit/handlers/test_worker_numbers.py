"""A handler worker's hop of small numeric requests (one CSV line each) is read together
(``codec.decode_numeric_many``): every request must come out as it does in a hop of its own,
and each ``output_handler`` call that an odd request makes happens once."""

from __future__ import annotations

import json
import textwrap

import numpy as np

from tfbatch.handlers.pool_worker import IN_RUN, TENSORS_RUN, Worker
from tfbatch.runtime.signature import SignatureInfo, TensorInfo

SCRIPT = """
import json

CALLS = []

def input_handler(data, context):
    text = data.read().decode()
    if text == "words":
        return json.dumps({"instances": [["a", "b", "c"]]})  # strings for a float input: the model refuses
    if text == "not json":
        return "{not json"
    return json.dumps({"instances": [[float(v) for v in text.split(",")]]})

def output_handler(response, context):
    CALLS.append(response.status_code)
    if response.status_code != 200:
        raise ValueError("refused: " + response.content.decode())
    return response.content, "application/json"
"""


def _worker(tmp_path) -> Worker:
    script = tmp_path / "inference.py"
    script.write_text(textwrap.dedent(SCRIPT))
    sig = SignatureInfo("serving_default", "tensorflow/serving/predict",
                        {"x": TensorInfo("x", "x:0", "float32", (None, 3))},
                        {"y": TensorInfo("y", "y:0", "float32", (None,))})
    worker = Worker({"script": str(script), "max_image_pixels": 10**7, "grpc_max_message_bytes": 2**20})
    worker.models = {"model": (1, {"serving_default": sig}, "serving_default")}
    return worker


def _item(line: bytes) -> tuple:
    return (memoryview(line), "text/csv", "application/json", None, "model", None, "predict", None, None)


def _rows(results: list) -> list:
    """Each request's tensor (a run's rows cut back per request), or its final answer."""
    out = []
    for result in results:
        if result[0] == TENSORS_RUN:
            at = 0
            for size in result[5]:
                out.append(("tensors", result[1]["x"][at:at + size]))
                at += size
        elif result[0] == "tensors":
            out.append(("tensors", result[1]["x"]))
        elif result[0] != IN_RUN:
            out.append(result)
    return out


def test_a_hops_lines_read_together_come_out_as_each_alone(tmp_path):
    worker = _worker(tmp_path)
    lines = [b"%d,%d.5,-%d" % (n, n, n) for n in range(40)]
    lines[7:7] = [b"1,2,3", b"4,5,6", b"words", b"1.5,2", b"not json", b"7,8,9"]
    together = _rows(worker.run("input", [_item(line) for line in lines]))
    alone = [r for line in lines for r in _rows(worker.run("input", [_item(line)]))]
    assert len(together) == len(alone) == len(lines)
    for got, want, line in zip(together, alone, lines):
        assert got[0] == want[0], line
        if got[0] == "tensors":
            assert got[1].dtype == want[1].dtype == np.float32 and got[1].tobytes() == want[1].tobytes(), line
        else:
            assert got == want, line
    finals = {lines[n]: r for n, r in enumerate(together) if r[0] == "final"}
    assert sorted(finals) == [b"1.5,2", b"not json", b"words"]
    # The model's refusal reached output_handler, whose own error is the answer: once each.
    assert json.loads(finals[b"words"][2])["error"].startswith("refused: ")
    calls = worker.handlers.output_handler.__globals__["CALLS"]
    assert len(calls) == 2 * 3 and set(calls) == {400}  # three refused lines, together and alone
