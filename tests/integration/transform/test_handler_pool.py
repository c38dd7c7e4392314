"""Scripted jobs with the hooks in handler worker processes (handlers/pool.py, transform/dataflow.py).

Each job runs twice, with ``handler_workers=0`` (the hooks in the instance's own process,
on a thread: ``InlinePool``) and with worker processes, and the two must agree byte for
byte: outputs, error text, report counts. Real TensorFlow, real spawned processes; a worker
is killed by the script itself when a trigger file exists, never by timing.
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from benchmarks.common.models import INFERENCE_SCRIPT
from tests.integration.transform.ledger_files import done_keys
from tests.support.outputs import agree
from tfbatch import run_transform
from tfbatch.artifact import package
from tfbatch.handlers.adaptive_pool import MOVE_SHARE
from tfbatch.handlers.inline_pool import MIN_CORES_FOR_WORKERS
from tfbatch.handlers.pool import START_WORKERS
from tfbatch.testing.models import make_image_bytes_model

# The bench's pair raises for one marked image, and dies (os._exit) while the trigger file
# exists: once (the trigger is removed first) or for good (the trigger stays).
SCRIPT = INFERENCE_SCRIPT + '''

import os
import time
from pathlib import Path

_plain_input = input_handler


def input_handler(data, context):
    body = data.read()
    if body.endswith(b"RAISE"):
        raise ValueError("this record asked to fail")
    trigger = os.environ.get("KILL_TRIGGER")
    if body.endswith(b"KILL") and trigger and Path(trigger).exists():
        if os.environ.get("KILL_ONCE"):
            Path(trigger).unlink()
        os._exit(7)
    if body.endswith(b"SPIN"):  # 10 ms of this thread's CPU: a heavy hook
        end = time.thread_time() + 0.01
        while time.thread_time() < end:
            pass
    stall = os.environ.get("STALL_DIR")
    if body.endswith(b"STALL") and stall:
        # Held until the test lets go (at most a minute, so nothing outlives the session).
        Path(stall, "reached").touch()
        for _ in range(1200):
            if Path(stall, "release").exists():
                break
            time.sleep(0.05)
    import io
    return _plain_input(io.BytesIO(body), context)
'''


def _png(value: int, tail: bytes = b"") -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.full((8, 8), value % 256, np.uint8)).save(buf, format="PNG")
    return buf.getvalue() + tail  # bytes after IEND: PNG decoders ignore them


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    root = tmp_path_factory.mktemp("pool")
    savedmodel = make_image_bytes_model(root / "sm" / "1")
    (root / "code").mkdir()
    (root / "code" / "inference.py").write_text(SCRIPT)
    return package([savedmodel], root / "model.tar.gz", code_dir=root / "code")


def _inputs(root: Path, tails: dict[int, bytes] | None = None, count: int = 40) -> Path:
    root.mkdir()
    for n in range(count):
        (root / f"img-{n:03d}.png").write_bytes(_png(n * 7, (tails or {}).get(n, b"")))
    return root


def _outputs(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(root.glob("*.out"))}


def _run(archive, inp, out, workers, **kw):
    return run_transform(model=str(archive), input=str(inp), output=str(out), content_type="application/x-image",
                         handler_workers=workers, max_batch_size=1, **kw)


def test_pool_gives_the_in_process_bytes_and_errors(tmp_path, archive):
    inp = _inputs(tmp_path / "in", {3: b"RAISE", 11: b"RAISE"})
    before = _run(archive, inp, tmp_path / "before", 0)
    after = _run(archive, inp, tmp_path / "after", 2)
    assert _outputs(tmp_path / "after") == _outputs(tmp_path / "before")
    assert len(_outputs(tmp_path / "after")) == 38
    assert (after.succeeded, after.bad_input, after.failed_to_process) == (before.succeeded, before.bad_input, 0)
    key = lambda e: e["object"]  # noqa: E731
    assert sorted(after.errors, key=key) == sorted(before.errors, key=key)
    assert [e["error"] for e in after.errors] == ["this record asked to fail"] * 2
    (stats,) = after.batches.values()
    assert stats["lane"] == "dataflow" and stats["handler_workers"] == 2 and stats["hops"] > 0


def test_batches_of_records_share_one_model_call_and_keep_their_rows(tmp_path, archive):
    inp = _inputs(tmp_path / "in", count=48)
    one = _run(archive, inp, tmp_path / "one", 2)
    many = run_transform(model=str(archive), input=str(inp), output=str(tmp_path / "many"),
                         content_type="application/x-image", handler_workers=2, max_batch_size=16)
    assert one.ok and many.ok
    a, b = _outputs(tmp_path / "one"), _outputs(tmp_path / "many")
    assert len(a) == 48
    agree(a, b)
    (stats,) = many.batches.values()
    assert stats["batches"] == 3 and stats["rows"] == 48


def test_a_worker_that_dies_mid_batch_is_replaced_and_loses_nothing(tmp_path, archive, monkeypatch):
    inp = _inputs(tmp_path / "in", {5: b"KILL"})
    clean = _run(archive, inp, tmp_path / "clean", 0, env={"KILL_TRIGGER": str(tmp_path / "none")})
    trigger = tmp_path / "trigger"
    trigger.touch()
    monkeypatch.setenv("KILL_ONCE", "1")
    report = run_transform(model=str(archive), input=str(inp), output=str(tmp_path / "out"),
                           content_type="application/x-image", handler_workers=2, max_batch_size=8,
                           env={"KILL_TRIGGER": str(trigger), "KILL_ONCE": "1"})
    assert not trigger.exists()  # the hook did kill its process
    assert report.ok and report.succeeded == 40
    (stats,) = report.batches.values()
    assert stats["worker_restarts"] >= 1
    assert clean.ok and len(_outputs(tmp_path / "out")) == 40
    agree(_outputs(tmp_path / "out"), _outputs(tmp_path / "clean"))


def test_a_record_that_always_kills_its_worker_is_left_for_resume(tmp_path, archive):
    inp = _inputs(tmp_path / "in", {5: b"KILL"})
    trigger = tmp_path / "trigger"
    trigger.touch()
    out = tmp_path / "out"
    first = _run(archive, inp, out, 2, env={"KILL_TRIGGER": str(trigger)}, invocations_max_retries=1)
    assert (first.succeeded, first.failed_to_process, first.bad_input) == (39, 1, 0)
    (error,) = first.errors
    assert error["object"] == "img-005.png" and "handler worker process exited (exit code 7)" in error["error"]
    trigger.unlink()  # the cause is gone: a resumed run does that one object only
    second = _run(archive, inp, out, 2, env={"KILL_TRIGGER": str(trigger)})
    assert (second.succeeded, second.skipped) == (1, 39)
    clean = _run(archive, inp, tmp_path / "clean", 0, env={"KILL_TRIGGER": str(trigger)})
    assert clean.ok and _outputs(out) == _outputs(tmp_path / "clean")


def test_sigkill_of_a_scripted_job_resumes_byte_identical(tmp_path, archive):
    inp = _inputs(tmp_path / "in", {29: b"STALL"}, count=32)
    stall = tmp_path / "stall"
    stall.mkdir()
    killed = tmp_path / "killed"
    args = ["--model", str(archive), "--input", str(inp), "--content-type", "application/x-image",
            "--max-batch-size", "1", "--handler-workers", "2", "--progress", "off"]
    # Groups of 8 and no timed commits: outputs exist beyond the last journal record at the kill.
    env = {**os.environ, "STALL_DIR": str(stall), "TFBATCH_LEDGER_GROUP": "8", "TFBATCH_LEDGER_INTERVAL_S": "600"}
    proc = subprocess.Popen([sys.executable, "-m", "tfbatch", "transform", *args, "--output", str(killed)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)  # its own group: the handler workers die with it
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        # The event: the hook holds img-029, and a group was committed.
        if (stall / "reached").exists() and len(done_keys(killed)) >= 8:
            break
        time.sleep(0.02)
    assert proc.poll() is None, proc.communicate()
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert "img-029.png" not in done_keys(killed)
    (stall / "release").touch()
    resumed = subprocess.run([sys.executable, "-m", "tfbatch", "transform", *args, "--output", str(killed)],
                             capture_output=True, text=True, env=env, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert "already done, skipped" in resumed.stdout, resumed.stdout
    reference = tmp_path / "reference"
    assert _run(archive, inp, reference, 0, env={"STALL_DIR": str(stall)}).ok
    assert _outputs(killed) == _outputs(reference) and len(_outputs(reference)) == 32
    assert not [p for p in killed.rglob("*") if p.name.endswith(".tmp")]


def test_local_instances_each_run_their_own_handler_workers(tmp_path, archive):
    # A local engine's instances are daemonic processes: their handler workers must still start.
    inp = _inputs(tmp_path / "in", {7: b"RAISE"}, count=24)
    many = _run(archive, inp, tmp_path / "many", 1, instance_count=2)
    default = _run(archive, inp, tmp_path / "default", None, instance_count=2)
    alone = _run(archive, inp, tmp_path / "alone", 0)
    assert (many.succeeded, many.bad_input) == (alone.succeeded, alone.bad_input) == (23, 1)
    assert (default.succeeded, default.bad_input) == (23, 1)
    assert _outputs(tmp_path / "many") == _outputs(tmp_path / "alone") == _outputs(tmp_path / "default")
    assert [s["handler_workers"] for s in many.batches.values()] == [1, 1]
    share = max(1, (os.cpu_count() or 1) // 2)  # the default: the cores divided by the instances
    # ... in worker processes from MIN_CORES_FOR_WORKERS cores per instance (START_WORKERS of
    # them first, more while they are busy), else in process.
    if share >= MIN_CORES_FOR_WORKERS:
        assert all(min(START_WORKERS, share) <= s["handler_workers"] <= s["handler_workers_max"] == share
                   for s in default.batches.values()), default.batches
    else:
        assert [s["handler_workers"] for s in default.batches.values()] == [0, 0]


def test_a_default_job_on_few_cores_measures_its_hooks_share_of_the_cpu(tmp_path, archive):
    # Below MIN_CORES_FOR_WORKERS cores the hooks start in process and the job reads their
    # share of its CPU (handlers/adaptive_pool.py): hooks that spin 10 ms a record are most of
    # it, so they move to worker processes (or would, had the job outlasted their start).
    if not 2 <= (os.cpu_count() or 1) < MIN_CORES_FOR_WORKERS:
        pytest.skip("the hooks start in worker processes on this many cores (or cannot leave one core)")
    inp = _inputs(tmp_path / "in", {n: b"SPIN" for n in range(160)}, count=160)
    default = _run(archive, inp, tmp_path / "default", None)
    alone = _run(archive, inp, tmp_path / "alone", 0)
    assert default.ok and alone.ok and default.succeeded == 160
    assert _outputs(tmp_path / "default") == _outputs(tmp_path / "alone")
    (stats,) = default.batches.values()
    assert stats["hook_cpu_share"] >= MOVE_SHARE, stats
    assert stats["handler_workers"] in (0, 2) and ("worker processes" in stats["hooks"]) == (stats["handler_workers"] == 2)


GPU_ENV_SCRIPT = """
import os

def handler(data, context):
    data.read()
    return os.environ.get("CUDA_VISIBLE_DEVICES", "unset"), "text/plain"
"""


def test_worker_processes_see_no_gpu_and_in_process_hooks_see_the_instances(tmp_path, monkeypatch):
    from tfbatch.testing.models import scripted_archive

    # The model owns the GPUs: a worker that imported TensorFlow would otherwise hold a CUDA
    # context, and most of the memory, of each. (A CPU machine shows it through the variable.)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    archive = scripted_archive([make_image_bytes_model(tmp_path / "sm" / "1")], GPU_ENV_SCRIPT, tmp_path / "a")
    inp = _inputs(tmp_path / "in", count=4)
    for workers, seen in ((2, "-1"), (0, "0")):
        out = tmp_path / f"out{workers}"
        report = _run(archive, inp, out, workers)
        assert report.succeeded == 4
        assert set(_outputs(out).values()) == {seen.encode()}


def test_the_lane_holds_a_chunk_for_each_process_the_pool_may_grow_to(tmp_path, archive, monkeypatch):
    # The pool starts START_WORKERS processes and grows while they are busy. With chunks in
    # flight for only those (and one in the model) they never were, so it never grew: 16 cores,
    # 4 job processes, each pool 2 of its 4 processes, 10 of the 16 cores running
    # (benchmarks/transform/profile/sixteen-cores.md). Eight cores here, one process.
    monkeypatch.setattr("tfbatch.runtime.placement.usable_cores", lambda *a: 8)
    inp = _inputs(tmp_path / "in", count=24)
    report = _run(archive, inp, tmp_path / "out", None, processes=1)
    assert report.ok and report.succeeded == 24
    (stats,) = report.batches.values()
    assert stats["handler_workers_max"] == 8 and START_WORKERS <= stats["handler_workers"] <= 8, stats
    assert stats["workers"] == 8 + 1, stats
    assert _run(archive, inp, tmp_path / "alone", 0).ok
    assert _outputs(tmp_path / "out") == _outputs(tmp_path / "alone") and len(_outputs(tmp_path / "out")) == 24
