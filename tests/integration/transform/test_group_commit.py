"""A job SIGKILLed in the middle of a group (outputs written, journal record not yet) resumes byte-identical."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.integration.transform.ledger_files import done_keys, journal_files
from tfbatch import run_transform


def _outs(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and "_tfbatch" not in p.parts}


def test_sigkill_between_outputs_and_their_group_record(tmp_path, slow_model):
    inp = tmp_path / "in"
    (inp / "deep").mkdir(parents=True)
    for i in range(32):
        (inp / ("deep" if i % 4 == 0 else "") / f"g{i:02d}.jsonl").write_text(json.dumps([i, 1]) + "\n")
    args = ["--model", str(slow_model), "--input", str(inp), "--split-type", "Line", "--content-type",
            "application/json", "--assemble-with", "Line", "--max-batch-size", "1",
            "--max-concurrent-transforms", "2", "--progress", "off"]
    killed = tmp_path / "killed"
    # Groups of 8 and no timed commits: after the first group, outputs 9..15 exist with no record.
    env = {**os.environ, "TFBATCH_LEDGER_GROUP": "8", "TFBATCH_LEDGER_INTERVAL_S": "600"}
    proc = subprocess.Popen([sys.executable, "-m", "tfbatch", "transform", *args, "--output", str(killed)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and proc.poll() is None:
        # The event: one group committed and at least one output of the next group on disk.
        if len(done_keys(killed)) >= 8 and len(list(killed.rglob("*.out"))) > len(done_keys(killed)):
            break
        time.sleep(0.02)
    assert proc.poll() is None, proc.communicate()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    recorded = done_keys(killed)
    outputs = {p.relative_to(killed).as_posix()[: -len(".out")] for p in killed.rglob("*.out")}
    assert len(recorded) == 8 and len(journal_files(killed)) == 1
    assert set(recorded) < outputs  # mid-group: outputs beyond the last committed record
    # Never done without output: every recorded key's .out is complete.
    for key in recorded:
        assert (killed / (key + ".out")).read_text().count("\n") == 1

    resumed = subprocess.run([sys.executable, "-m", "tfbatch", "transform", *args, "--output", str(killed)],
                             capture_output=True, text=True, env=env, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert "(8 already done, skipped)" in resumed.stdout, resumed.stdout
    reference = tmp_path / "reference"
    run_transform(model=str(slow_model), input=str(inp), output=str(reference), split_type="Line",
                  content_type="application/json", assemble_with="Line", max_batch_size=32)
    assert _outs(killed) == _outs(reference) and len(_outs(reference)) == 32
    assert not [p for p in killed.rglob("*") if p.name.endswith(".tmp")]
    # The finished job compacted its journals: resuming it again lists one ledger file.
    assert len(journal_files(killed)) == 1
