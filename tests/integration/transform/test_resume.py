"""Resume: a ledger of finished objects; a SIGKILLed job finishes to byte-identical outputs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tfbatch import run_transform

from tests.integration.transform.ledger_files import done_keys, forget


def _outs(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
            and "_tfbatch" not in p.parts}


def test_rerun_skips_finished_objects_and_redoes_the_rest(tmp_path, linear_model):
    inp, out = tmp_path / "in", tmp_path / "out"
    inp.mkdir()
    for i in range(6):
        (inp / f"{i}.json").write_text(json.dumps([i, 1, 2]))
    common = dict(model=str(linear_model), input=str(inp), output=str(out), content_type="application/json")
    first = run_transform(**common)
    assert first.objects == 6 and first.skipped == 0
    reference = _outs(out)
    second = run_transform(**common)
    assert second.objects == 0 and second.skipped == 6 and second.ok
    # Lose one object's ledger entry (as if killed between its .out and its group commit): only it is redone.
    assert "3.json" in done_keys(out)
    forget(out, "3.json")
    (out / "3.json.out").unlink()
    third = run_transform(**common)
    assert third.objects == 1 and third.skipped == 5 and _outs(out) == reference
    # A changed job (other output-shaping settings) does not trust the old ledger.
    changed = run_transform(**common, accept="application/jsonlines")
    assert changed.objects == 6 and changed.skipped == 0
    assert run_transform(**common, resume=False).objects == 6


def _cmdline(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline())
    except psutil.Error:  # gone already
        return ""


def _cli(args: list[str]) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "tfbatch", "transform", *args, "--progress", "off"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


@pytest.mark.parametrize("processes", ["1", "2"])
def test_sigkill_mid_job_then_resume_gives_identical_outputs(tmp_path, slow_model, processes):
    inp = tmp_path / "in"
    (inp / "sub").mkdir(parents=True)
    for i in range(24):
        (inp / ("sub" if i % 3 == 0 else "") / f"f{i:02d}.jsonl").write_text(
            "".join(json.dumps([i, j]) + "\n" for j in range(2)))
    # One row per model batch at 0.25 s each: the job takes ~6 s, long enough to kill it midway.
    args = ["--model", str(slow_model), "--input", str(inp), "--split-type", "Line", "--content-type",
            "application/json", "--assemble-with", "Line", "--max-batch-size", "1", "--max-concurrent-transforms", "4",
            "--processes", processes]
    killed_out, reference_out = tmp_path / "killed", tmp_path / "reference"
    proc = _cli([*args, "--output", str(killed_out)])
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if len(done_keys(killed_out)) >= 5:
            break
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()
    # With --processes 2 the objects run in two spawned worker processes: they must go with it.
    workers = psutil.Process(proc.pid).children(recursive=True)
    assert len([w for w in workers if "spawn_main" in _cmdline(w)]) == (2 if processes == "2" else 0)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    gone, alive = psutil.wait_procs(workers, timeout=60)
    assert not alive, alive
    finished = len(done_keys(killed_out))
    assert 5 <= finished < 24

    # Meanwhile nothing half-written is visible: every .out present is complete JSON lines.
    for path in killed_out.rglob("*.out"):
        assert len(path.read_text().splitlines()) == 2

    resumed = _cli([*args, "--output", str(killed_out)])
    stdout, stderr = resumed.communicate(timeout=180)
    assert resumed.returncode == 0, stderr
    assert f"({finished} already done, skipped)" in stdout, stdout
    run_transform(model=str(slow_model), input=str(inp), output=str(reference_out), split_type="Line",
                  content_type="application/json", assemble_with="Line", max_batch_size=32)
    assert _outs(killed_out) == _outs(reference_out)
    assert len(_outs(reference_out)) == 24
    assert not [p for p in killed_out.rglob("*") if ".tmp-" in p.name]
