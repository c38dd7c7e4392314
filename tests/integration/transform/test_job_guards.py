"""Job-level guards: --max-error-rate stops early and resumes; one job per output prefix."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tfbatch.storage.lock import OutputLock
from tfbatch import run_transform


def test_max_error_rate_stops_early_with_a_summary_and_the_job_resumes(tmp_path, linear_model):
    inp = tmp_path / "in"
    inp.mkdir()
    for i in range(60):
        # Nearly every object is bad input (not JSON): a job pointed at the wrong data.
        (inp / f"o{i:03d}.json").write_bytes(json.dumps([i, 1, 2]).encode() if i % 10 == 0 else b"\x89PNG...")
    common = dict(model=str(linear_model), input=str(inp), output=str(tmp_path / "out"),
                  content_type="application/json", max_concurrent_transforms=1)
    first = run_transform(**common, error_rate_after=10)
    assert first.stopped and "--max-error-rate" in first.stopped and not first.ok
    assert 10 <= first.objects < 60
    assert "stopped early" in first.summary()
    # Resumable: what it finished (bad inputs recorded included) is kept, the rest runs now.
    rest = run_transform(**common, max_error_rate=1.0)
    assert rest.skipped == first.objects - first.failed_to_process
    assert rest.objects + rest.skipped == 60 and not rest.stopped
    # --retry-failed runs the recorded bad inputs again (and only them).
    again = run_transform(**common, max_error_rate=1.0, retry_failed=True)
    assert again.objects == 54 and again.skipped == 6


def test_a_second_job_on_the_same_output_is_refused_and_leaves_the_first_alone(tmp_path, linear_model):
    inp, out = tmp_path / "in", tmp_path / "out"
    inp.mkdir()
    (inp / "a.json").write_text("[1, 2, 3]")
    (out / "sub").mkdir(parents=True)
    # A temporary file of the job holding the lock (this test): the refused job must not touch it.
    live_temp = out / "sub" / ".tfb-0123456789abcdef-0123456789ab.tmp"
    live_temp.write_bytes(b"partial")
    with OutputLock(str(out)):
        proc = subprocess.run([sys.executable, "-m", "tfbatch", "transform", "--model", str(linear_model),
                               "--input", str(inp), "--output", str(out), "--content-type", "application/json",
                               "--progress", "off"], capture_output=True, text=True, timeout=300,
                              env={**os.environ})
        assert proc.returncode != 0
        assert f"output prefix '{out}' is in use by job pid {os.getpid()}" in proc.stderr + proc.stdout
        assert live_temp.exists() and not (out / "a.json.out").exists()
    # Once released, the next job starts, and (holding the lock) clears the stale temporary file.
    report = run_transform(model=str(linear_model), input=str(inp), output=str(out), content_type="application/json")
    assert report.ok and (out / "a.json.out").exists() and not live_temp.exists()
