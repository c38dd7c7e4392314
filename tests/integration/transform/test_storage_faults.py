"""Every input ends as exactly one of: output written, recorded bad input, retried on resume.

Random keys (shapes that used to collide), random truncations (bad input) and storage
exceptions raised by an fsspec wrapper filesystem on reads. A storage failure must never
be recorded as done; the resumed run, with the faults gone, finishes every object.
Budget: ``HYPOTHESIS_PROFILE=long`` runs more examples (see docs in the module below).
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.integration.transform.faulty_fs import FaultyFileSystem
from tests.integration.transform.ledger_files import done_keys, entries
from tfbatch import run_transform

settings.register_profile("ci", max_examples=3, deadline=None,
                          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
settings.register_profile("long", max_examples=60, deadline=None,
                          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

segment = st.text(st.sampled_from("ab._-é"), min_size=1, max_size=12).filter(lambda s: s not in (".", ".."))
key_shape = st.lists(segment, min_size=1, max_size=3).map("/".join)
fate = st.sampled_from(["good", "truncated", "reset", "denied"])


@given(st.dictionaries(key_shape, fate, min_size=1, max_size=8), st.randoms(use_true_random=False))
def test_each_input_is_written_recorded_or_retried(tmp_path, linear_model, plan, rnd):
    # A key that is also a folder of another key cannot exist in a real tree; drop those.
    plan = {k: v for k, v in plan.items() if not any(other.startswith(k + "/") for other in plan)}
    root = f"/in-{uuid.uuid4().hex[:8]}"
    fs = FaultyFileSystem()
    FaultyFileSystem.faults.clear()
    for i, (key, what) in enumerate(sorted(plan.items())):
        body = json.dumps([i, 1.0, 2.0]).encode()
        if what == "truncated":
            body = body[: rnd.randrange(1, len(body) - 1)]
        fs.pipe_file(f"{root}/{key}", body)
        if what == "reset":
            FaultyFileSystem.faults[f"{root}/{key}"] = ConnectionResetError("connection reset by peer")
        elif what == "denied":
            FaultyFileSystem.faults[f"{root}/{key}"] = PermissionError("access denied")
    out = tmp_path / uuid.uuid4().hex[:8]
    common = dict(model=str(linear_model), input=f"faulty://{root}/", output=str(out),
                  content_type="application/json", max_error_rate=1.0)
    report = run_transform(**common)
    done = set(done_keys(out))
    recorded = {e["k"] for e in entries(out) if e.get("e") and not e.get("retry")}
    retried = {e["k"] for e in entries(out) if e.get("retry")}
    for key, what in plan.items():
        written = (out / (key + ".out")).exists()
        if what == "good":
            assert written and key in done and key not in recorded
        elif what == "truncated":
            assert not written and key in done and key in recorded
        else:
            # Never done without its output: a storage failure is only ever retried.
            assert not written and key not in done and key in retried
    assert report.failed_to_process == sum(v in ("reset", "denied") for v in plan.values())
    assert report.bad_input == sum(v == "truncated" for v in plan.values())

    FaultyFileSystem.faults.clear()  # the storage heals
    resumed = run_transform(**common)
    assert resumed.objects == sum(v in ("reset", "denied") for v in plan.values())
    assert resumed.failed_to_process == 0
    for key, what in plan.items():
        assert (out / (key + ".out")).exists() == (what != "truncated")
    errors = (out / "_tfbatch" / "errors.jsonl")
    lines = errors.read_text().splitlines() if errors.exists() else []
    assert sorted(json.loads(x)["object"] for x in lines) == sorted(k for k, v in plan.items() if v == "truncated")
