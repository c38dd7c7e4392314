"""Handler worker processes start, and import the script, while the model is still loading.

The proof is an event, not a clock. The model's TFS warm-up request makes it write to a named
pipe, and opening a pipe for writing waits until someone opens it for reading. Only the
script, imported in a handler worker process, does that. So the model load cannot finish
unless a worker has started and imported the script before it did: with the pool started
after the load (as before), this job never gets past loading its model.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tfbatch.artifact import package
from tfbatch.records.writers import write_tfrecord
from tfbatch.tfs.warmup import WARMUP_FILE, prediction_log_pb2

# Module code runs in the job's process too (it imports the script to learn its mode); only a
# handler worker process opens the pipe. It reads until the model's byte arrives (a read
# finds nothing while no writer is there yet), or until another worker got it.
SCRIPT = '''
import json
import os
import sys
import time

_spec = getattr(sys.modules["__main__"], "__spec__", None)
if _spec is not None and _spec.name == "tfbatch.handlers.pool_worker":
    gate = os.environ["GATE_FIFO"]
    fd = os.open(gate, os.O_RDONLY | os.O_NONBLOCK)
    try:
        for _ in range(2400):  # at most two minutes, so nothing outlives the test
            if os.path.exists(gate + ".passed"):
                break
            try:
                got = os.read(fd, 16)
            except BlockingIOError:
                got = b""
            if got:
                open(gate + ".passed", "w").close()
                break
            time.sleep(0.05)
    finally:
        os.close(fd)


def input_handler(data, context):
    return json.dumps({"instances": [data.read().decode("utf-8")]})


def output_handler(response, context):
    return response.content, context.accept_header
'''


def _model(path, fifo: str):
    """``x``: strings -> ``y``: their lengths; its warm-up request (signature ``gate``) writes to ``fifo``."""
    import tensorflow as tf

    class Gate(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="x")])
        def serve(self, x):
            return {"y": tf.strings.length(x)}

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="path")])
        def gate(self, path):
            tf.io.write_file(path[0], "x")
            return {"passed": tf.ones_like(path, tf.int32)}

    module = Gate()
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve, "gate": module.gate})
    entry = prediction_log_pb2().PredictionLog()
    entry.predict_log.request.model_spec.name = "model"
    entry.predict_log.request.model_spec.signature_name = "gate"
    entry.predict_log.request.inputs["path"].CopyFrom(tf.make_tensor_proto(np.array([fifo.encode()])))
    warmup = path / WARMUP_FILE
    warmup.parent.mkdir(parents=True, exist_ok=True)
    warmup.write_bytes(write_tfrecord([entry.SerializeToString()]))
    return path


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes")
def test_handler_workers_import_the_script_while_the_model_loads(tmp_path):
    fifo = str(tmp_path / "gate")
    os.mkfifo(fifo)
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "inference.py").write_text(SCRIPT)
    archive = package([_model(tmp_path / "sm" / "1", fifo)], tmp_path / "model.tar.gz", code_dir=tmp_path / "code")
    inputs = tmp_path / "in"
    inputs.mkdir()
    for n in range(12):
        (inputs / f"p{n:02d}.txt").write_text("x" * (n + 1))
    out = tmp_path / "out"
    args = ["--model", str(archive), "--input", str(inputs), "--output", str(out), "--content-type", "text/plain",
            "--handler-workers", "2", "--max-batch-size", "4", "--progress", "off", "--env", f"GATE_FIFO={fifo}"]
    # The timeout only ends a job that would otherwise wait on the pipe forever (the old order).
    done = subprocess.run([sys.executable, "-m", "tfbatch", "transform", *args], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    assert os.path.exists(fifo + ".passed")  # a worker read the model's byte: the load went through it
    outputs = {p.name: json.loads(p.read_bytes()) for p in out.glob("*.out")}
    assert outputs == {f"p{n:02d}.txt.out": {"predictions": [n + 1]} for n in range(12)}
    report = json.loads((out / "_tfbatch" / "report.json").read_text())
    (stats,) = report["batches"].values()
    assert stats["lane"] == "dataflow"
    assert stats["workers_started_before_model_loaded"] == stats["handler_workers"] == 2
