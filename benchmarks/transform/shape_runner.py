"""Running one contender of one job shape and measuring it (used by :mod:`.shapes`).

Each contender starts in fresh processes, under a :class:`~benchmarks.common.measure.TreeMonitor`
(peak RSS, CPU over time). Throughput comes from the outputs: every object's ``.out`` finish
time (an S3 output's LastModified with ``--s3-outputs``) weighted by its rows gives the steady
rate (:func:`.shape_outputs.steady_rate`), the same way for every contender; whole-process
rate is rows / wall time from launch to exit.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from benchmarks.common import measure
from benchmarks.transform.shape_outputs import read_outputs, steady_rate


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _launch(cmd: list[str], log: Path) -> subprocess.Popen:
    with open(log, "wb") as handle:
        return subprocess.Popen(cmd, stdout=handle, stderr=subprocess.STDOUT, env=_env())


def _wait_port(port_file: Path, proc: subprocess.Popen, timeout_s: float) -> int:
    import requests

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with code {proc.returncode} before listening")
        if port_file.exists():
            port = int(port_file.read_text())
            try:
                if requests.get(f"http://127.0.0.1:{port}/ping", timeout=5).status_code == 200:
                    return port
            except requests.RequestException:
                pass
        time.sleep(0.05)
    raise RuntimeError(f"server did not answer /ping within {timeout_s:.0f}s")


TRASH = ".set-aside"


def set_aside(output: Path) -> None:
    """Move an earlier run's output folder out of the way instead of deleting it.

    On ext4, files created within a few minutes of many deletions cost up to ten times more
    kernel CPU each (the inode allocator skips recently freed inodes one by one), so the
    contender that ran right after an ``rmtree`` of thousands of outputs paid for it. The
    folders are deleted once, after the last measurement (:func:`empty_trash`)."""
    if output.exists():
        trash = output.parent / TRASH
        trash.mkdir(exist_ok=True)
        output.rename(trash / f"{output.name}-{time.time_ns()}")


def empty_trash(root: Path) -> None:
    for trash in root.rglob(TRASH):
        shutil.rmtree(trash, ignore_errors=True)


def run(contender: str, job: Any, output: Path, logs: Path, tag: str, timeout_s: float) -> dict[str, Any]:
    """Run ``contender`` ("a", "b" or "c") of ``job``; a result dict (rows read back included)."""
    set_aside(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"{tag}-{contender}.log"
    # --s3-outputs: the run writes under its own prefix on the S3 server, read back once it ends.
    dest = str(output) if job.outputs_uri is None else f"{job.outputs_uri}{tag}-{contender}-{time.time_ns()}/"
    error: str | None = None
    cpu = 0.0
    with measure.TreeMonitor() as tree:
        launched = measure.now()
        if contender in "ab":
            cmd = (job.a if contender == "a" else job.b) + ["--output", dest]
            proc = _launch(cmd, log)
            tree.watch(proc.pid)
            error, cpu = measure.wait_logged(proc, log, timeout_s)
        else:
            port_file = logs / f"{tag}-c.port"
            port_file.unlink(missing_ok=True)
            server_log = logs / f"{tag}-c-server.log"
            server = _launch(job.c_server + ["--port-file", str(port_file)], server_log)
            tree.watch(server.pid)
            cmd = job.c_server + ["&&"] + job.c_client
            try:
                port = _wait_port(port_file, server, timeout_s)
                cmd = job.c_server + ["&&"] + job.c_client + ["--url", f"http://127.0.0.1:{port}", "--output", dest]
                client = _launch(cmd[len(job.c_server) + 1:], log)
                tree.watch(client.pid)
                error, cpu = measure.wait_logged(client, log, timeout_s)
            except RuntimeError as exc:
                error = str(exc)
            finally:
                server.terminate()
                _, server_cpu = measure.wait_logged(server, server_log, 30)
                cpu += server_cpu
        ended = measure.now()
    if job.outputs_uri is not None:
        from benchmarks.transform.s3_inputs import download

        download(dest, output)
    return _finish(contender, job, output, cmd, error, cpu, launched, ended, tree)


def _finish(contender, job, output: Path, cmd, error, cpu, launched, ended, tree) -> dict[str, Any]:
    rows = read_outputs(output) if output.exists() else {}
    finished = [((output / name).stat().st_mtime, len(r)) for name, r in rows.items()]
    records = sum(len(r) for r in rows.values())
    rate, start, counted = steady_rate(finished)
    result: dict[str, Any] = {
        "contender": contender, "ok": error is None, "error": error, "command": cmd,
        "objects": len(rows), "records": records, "wall_s": ended - launched,
        "steady_per_s": rate, "end_to_end_per_s": records / (ended - launched) if ended > launched else None,
        "startup_s": min(t for t, _ in finished) - launched if finished else None,
        "cpu_s": cpu, "cpu_ms_per_record": 1000 * cpu / records if records else None,
        "peak_rss_mb": tree.peak_bytes / 2**20, "steady_cpu_ms_per_record": None,
    }
    if start is not None and counted:
        c0, c1 = tree.cpu_at(start), tree.cpu_at(max(t for t, _ in finished))
        if c0 is not None and c1 is not None:
            result["steady_cpu_ms_per_record"] = 1000 * (c1 - c0) / counted
    if result["ok"] and (len(rows) != job.objects or records != job.records):
        result["ok"] = False
        result["error"] = (f"expected {job.objects} objects / {job.records} records, "
                           f"found {len(rows)} / {records}")
    result["_rows"] = rows  # dropped before saving; the agreement check reads it
    return result
