"""What the handler-pool tests share: a fake clock they move, and request bodies for the linear
model, one of which a test script's hook holds on a FIFO (``POOL_GATE``) until the test writes."""

from __future__ import annotations

import json

ROW = json.dumps({"instances": [[1.0, 2.0, 3.0]]}).encode()
BLOCKED = json.dumps({"instances": [[1.0, 2.0, 3.0]], "block": 1}).encode()

# The input_handler both scripts start with: a body marked "block" waits on the FIFO.
GATED_INPUT = '''
import json
import os


def input_handler(data, context):
    body = data.read()
    if b"block" in body:
        with open(os.environ["POOL_GATE"]) as gate:
            gate.read()
    return body
'''


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def gated_artifact(tmp_path, monkeypatch, script: str):
    """The linear model with ``script`` as its inference.py, and the FIFO its gated hook waits
    on (the worker processes inherit ``POOL_GATE``): (artifact folder, FIFO path)."""
    import os

    from tfbatch.testing.models import make_linear_model

    gate = tmp_path / "gate"
    os.mkfifo(gate)
    monkeypatch.setenv("POOL_GATE", str(gate))
    root = tmp_path / "artifact"
    make_linear_model(root / "1")
    (root / "code").mkdir()
    (root / "code" / "inference.py").write_text(script)
    return root, gate
