"""Many small objects on local disk: objects/s, system time per object, peak RSS vs count.

Generates ``--count`` small JPEGs (32x32 crops of the offline photos, ~1-2 KB each, what a
digits- or thumbnail-style job reads), builds the benchmark's ``tiny`` model as a no-script
archive (the batch lane's job), and runs the real command line as a child process:

    python -m tfbatch transform --model <archive> --input <dir> --output <dir> \\
        --content-type application/x-image

The child's own CPU time and peak RSS come from ``wait4`` (the job runs in one process
with ``instance_count`` 1); objects/s is given end to end (launch to exit, start-up
included) and steady (output files' mtimes after the first 10 %). Targets (issue 10):
>= 2,000 objects/s, <= 0.2 ms system time per object, peak RSS flat from 20k to 200k.

    python -m benchmarks.scale.small_objects --counts 20000,200000 --json benchmarks/scale/results/small_objects.json
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SIDE = 32


def generate(folder: Path, count: int, seed: int = 0) -> int:
    """``count`` JPEGs in 100 sub-folders; kept when a previous run made the same set."""
    import numpy as np
    from PIL import Image

    from benchmarks.common.dataset import source_photos

    stamp = folder / ".." / f"{folder.name}.done"
    want = f"{count}:{seed}:{SIDE}"
    if stamp.exists() and stamp.read_text() == want:
        return count
    if folder.exists():
        shutil.rmtree(folder)
    rng = np.random.default_rng(seed)
    photos = [p for _name, p in source_photos()]
    total = 0
    for i in range(count):
        photo = photos[i % len(photos)]
        h, w = photo.shape[:2]
        side = int(rng.integers(SIDE, max(SIDE + 1, min(h, w) // 4)))
        top, left = int(rng.integers(0, h - side + 1)), int(rng.integers(0, w - side + 1))
        crop = Image.fromarray(photo[top:top + side, left:left + side]).resize((SIDE, SIDE))
        buf = io.BytesIO()
        crop.save(buf, format="JPEG", quality=90)
        sub = folder / f"d{i % 100:02d}"
        if i < 100:
            sub.mkdir(parents=True, exist_ok=True)
        (sub / f"img{i:07d}.jpg").write_bytes(buf.getvalue())
        total += len(buf.getvalue())
    stamp.write_text(want)
    return count


def run_job(archive: Path, inputs: Path, output: Path, extra: list[str]) -> dict:
    from benchmarks.common.measure import output_timing

    if output.exists():
        shutil.rmtree(output)
    cmd = [sys.executable, "-m", "tfbatch", "transform", "--model", str(archive), "--input", str(inputs),
           "--output", str(output), "--content-type", "application/x-image", *extra]
    log = output.with_suffix(".log")
    started = time.time()
    with open(log, "wb") as sink:
        proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT)
        _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.time() - started
    code = os.waitstatus_to_exitcode(status)
    timing = output_timing(output)
    report_path = output / "_tfbatch" / "report.json"
    report = json.loads(report_path.read_text()) if report_path.exists() else {}
    n = timing.outputs
    return {
        "command": cmd, "exit_code": code, "objects": n, "wall_s": round(wall, 2),
        "objects_per_s_end_to_end": round(n / wall, 1) if wall else None,
        "objects_per_s_steady": round(timing.steady_images_per_s, 1) if timing.steady_images_per_s else None,
        "startup_s": round(timing.first_output - started, 2) if timing.first_output else None,
        "user_cpu_s": round(usage.ru_utime, 2), "system_cpu_s": round(usage.ru_stime, 2),
        "system_ms_per_object": round(1000 * usage.ru_stime / n, 3) if n else None,
        "cpu_ms_per_object": round(1000 * (usage.ru_utime + usage.ru_stime) / n, 3) if n else None,
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
        "voluntary_ctx_switches": usage.ru_nvcsw, "involuntary_ctx_switches": usage.ru_nivcsw,
        "batches": report.get("batches"),
        "log_tail": log.read_text(errors="replace")[-1500:] if code else None,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--counts", default="20000", help="comma list of object counts, e.g. 20000,200000")
    p.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "tfbatch-small-objects"))
    p.add_argument("--keep", action="store_true", help="keep the generated files for the next run")
    p.add_argument("--json")
    p.add_argument("extra", nargs="*", help="after --: more tfbatch transform flags")
    args = p.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from benchmarks.common.models import ensure_artifact, scriptless_archive

    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    archive = scriptless_archive(ensure_artifact("tiny", work))
    result: dict = {"command": "python -m benchmarks.scale.small_objects " + " ".join(argv or sys.argv[1:]),
                    "cpus": os.cpu_count(), "runs": {}}
    try:
        for count in [int(c) for c in args.counts.split(",")]:
            inputs = work / f"in-{count}"
            t = time.monotonic()
            generate(inputs, count)
            run = run_job(archive, inputs, work / f"out-{count}", args.extra)
            run["generate_s"] = round(time.monotonic() - t - run["wall_s"], 1)
            result["runs"][str(count)] = run
            print(json.dumps({count: {k: v for k, v in run.items() if k not in ("command", "batches")}}),
                  flush=True)
    finally:
        if not args.keep:
            for path in work.glob("out-*"):
                shutil.rmtree(path, ignore_errors=True)
    runs = list(result["runs"].values())
    if len(runs) >= 2 and runs[0]["peak_rss_mb"]:
        result["peak_rss_ratio_last_vs_first"] = round(runs[-1]["peak_rss_mb"] / runs[0]["peak_rss_mb"], 2)
        # Per-object cost without start-up (TensorFlow's import and the model load): the
        # difference between each run and the first, smallest one.
        first = runs[0]
        for run in runs[1:]:
            extra = run["objects"] - first["objects"]
            if extra > 0:
                run["marginal_system_ms_per_object"] = round(1000 * (run["system_cpu_s"] - first["system_cpu_s"]) / extra, 3)
                run["marginal_cpu_ms_per_object"] = round(
                    1000 * (run["user_cpu_s"] + run["system_cpu_s"] - first["user_cpu_s"] - first["system_cpu_s"]) / extra, 3)
                if run["wall_s"] > first["wall_s"]:
                    run["marginal_objects_per_s"] = round(extra / (run["wall_s"] - first["wall_s"]), 1)
    result["targets"] = {"objects_per_s": 2000, "system_ms_per_object": 0.2, "peak_rss": "flat vs count"}
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
