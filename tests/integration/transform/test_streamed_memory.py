"""An object too large for the dataflow to hold is streamed through it in bounded memory.

A child process runs two jobs on the same model: a small one first (TensorFlow, the model and
the job's threads set up), then one over a 256 MiB CSV object of 1 MiB lines that the model
refuses, a few good lines among them. Held whole, such an object would cost its raw bytes and
its split payloads (over 512 MiB); streamed, a few hops of requests are in flight at a time
(``Dataflow._streamed``: up to ``STREAM_AHEAD_BYTES`` ahead), so the second job may raise the
child's peak RSS by far less than the object's size. Every line still answers: an error line
for each bad one, a prediction for each good one, in order.

Measured on the 2-vCPU VM: streamed, the second job did not raise the peak the first had set
(growth 0 MiB); with the object held whole (``MAX_OBJECT_BYTES`` raised in the child), 573 MiB.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tfbatch.transform.dataflow import MAX_OBJECT_BYTES, STREAM_AHEAD_BYTES

LINE_BYTES = 1 << 20
LINES = 256
GOOD_EVERY = 32  # line n is "1,2,<n>" when n % GOOD_EVERY == 0
MAX_GROWTH_MIB = 160  # streaming keeps ~STREAM_AHEAD_BYTES of requests (32 MiB) and their answers

_CHILD = r"""
import json, resource, sys
from tfbatch import run_transform

model, small, big, out = sys.argv[1:5]
common = dict(model=model, split_type="Line", content_type="text/csv", assemble_with="Line",
              batch_strategy="SingleRecord", handler_workers=0)
warm = run_transform(input=small, output=out + "-warm", **common)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
report = run_transform(input=big, output=out, **common)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
(stats,) = report.batches.values()
print(json.dumps({"warm_records": warm.records, "records": report.records, "failed": report.failed_records,
                  "streamed": stats["objects_streamed"], "before_kib": before, "after_kib": after}))
"""


def _write_lines(path: Path, lines: int) -> None:
    bad = b"x" * LINE_BYTES + b"\n"
    with open(path, "wb") as f:
        for n in range(lines):
            f.write(f"1,2,{n}\n".encode() if n % GOOD_EVERY == 0 else bad)


def test_a_big_object_of_bad_lines_streams_in_bounded_memory(tmp_path, linear_model):
    assert LINES * LINE_BYTES > MAX_OBJECT_BYTES and STREAM_AHEAD_BYTES < MAX_GROWTH_MIB << 20
    small, big = tmp_path / "small", tmp_path / "big"
    small.mkdir()
    big.mkdir()
    _write_lines(small / "few.csv", 4)
    _write_lines(big / "many.csv", LINES)
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(linear_model), str(small), str(big),
                           str(tmp_path / "out")], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["streamed"] == 1 and result["records"] == LINES
    good = LINES // GOOD_EVERY
    assert result["failed"] == LINES - good
    out = (tmp_path / "out" / "many.csv.out").read_text().splitlines()
    assert len(out) == LINES
    for n, line in enumerate(out):
        if n % GOOD_EVERY == 0:
            assert "error" not in json.loads(line), (n, line[:200])
        else:
            error = json.loads(line)
            assert error["record"] == n and "text/csv body is not CSV" in error["error"] \
                and "131,072 characters" in error["error"], (n, line[:300])
    growth_mib = (result["after_kib"] - result["before_kib"]) / 1024
    assert growth_mib < MAX_GROWTH_MIB, f"peak RSS grew by {growth_mib:.0f} MiB streaming a 256 MiB object"
