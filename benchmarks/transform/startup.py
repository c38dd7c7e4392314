"""Start-up of a one-image job (issue 10, item 6): time to first output, total, and where it goes.

    python -m benchmarks.transform.startup --runs 3 --baseline-src BASE/src --out benchmarks/transform/startup.json

Runs ``python -m tfbatch transform`` on a folder holding one JPEG with the tiny model (the
no-script archive, as the seed's image-bytes model is used) in fresh processes, and records:

- wall time launch -> first ``.out`` written, and launch -> exit; CPU seconds (user + system)
  of the process, which a shared machine disturbs far less than wall time;
- ``python -X importtime``: cumulative import time of TensorFlow (with Keras), of tfbatch's
  own modules (self time, TensorFlow excluded) and of what else is imported (pydantic, numpy, ...);
- a py-spy sampling profile of one run, every sample put in one phase by the frames on its
  stack: TensorFlow import, other imports, argument parsing and spec, planning (listing),
  model load, first model call (tracing included), writing and the ledger, the rest.

Wall figures on a shared VM vary with load; compare CPU seconds and the phase split.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.common.dataset import make_jpeg
from benchmarks.common.models import ensure_artifact, scriptless_archive
from benchmarks.transform.bench import _env, machine

# A sample goes to the first phase whose marker is on its stack (outermost frames first).
PHASES = (
    ("model load", ("saved_model/load.py", "load_model", "ModelServer.load", "servable.py:load", "_load_servable")),
    ("planning (listing)", ("transform/plan.py",)),
    ("first model call", ("run_prepared", "prepare_inputs", "polymorphic_function")),
    ("write + ledger", ("ledger.py", "journal.py", "_write", "atomic_write")),
    ("TensorFlow import", ("tensorflow/__init__.py", "keras/__init__.py", "tf_keras", "tensorflow/python/__init__")),
    ("other imports", ("<frozen importlib._bootstrap>",)),
    ("argument parsing + spec", ("build_parser", "spec_from_args", "parse_args", "TransformSpec")),
)


def _one_image(root: Path) -> Path:
    images = root / "one-image"
    if not images.exists():
        images.mkdir(parents=True)
        body, _ = make_jpeg(0, 0)
        (images / "0000000000000000.jpg").write_bytes(body)
    return images


def _cmd(archive: Path, images: Path, output: Path) -> list[str]:
    return ["-m", "tfbatch", "transform", "--model", str(archive), "--input", str(images), "--output",
            str(output), "--content-type", "application/x-image", "--progress", "off"]


def _env_for(src: str | None) -> dict[str, str]:
    """This checkout's tfbatch, or the one under ``src`` (another checkout's ``src/``)."""
    env = _env()
    if src:
        env["PYTHONPATH"] = str(Path(src).resolve())
    return env


def timed_run(archive: Path, images: Path, output: Path, src: str | None = None) -> dict[str, Any]:
    shutil.rmtree(output, ignore_errors=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    launched = time.time()
    proc = subprocess.run([sys.executable, *_cmd(archive, images, output)], env=_env_for(src), capture_output=True,
                          text=True)
    ended = time.time()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"one-image job failed ({proc.returncode}): {proc.stderr[-2000:]}")
    outs = [p for p in output.rglob("*.out") if "_tfbatch" not in p.parts]
    first = min(p.stat().st_mtime for p in outs)
    return {"first_output_s": first - launched, "total_s": ended - launched,
            "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
            "load_average": os.getloadavg()[0]}


def import_times(archive: Path, images: Path, output: Path, src: str | None = None) -> dict[str, Any]:
    """``-X importtime`` of one run, summed into TensorFlow, tfbatch's own and the others."""
    shutil.rmtree(output, ignore_errors=True)
    proc = subprocess.run([sys.executable, "-X", "importtime", *_cmd(archive, images, output)], env=_env_for(src),
                          capture_output=True, text=True)
    rows = []
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, cumulative_us, name = line[len("import time:"):].split("|", 2)
        rows.append((int(self_us), int(cumulative_us), name.rstrip()))
    top_level = Counter()  # cumulative time of each module imported at nesting level 0
    own_self = 0
    own_modules: Counter[str] = Counter()
    for self_us, cumulative_us, name in rows:
        depth = (len(name) - len(name.lstrip())) // 2
        module = name.strip()
        if depth == 0:
            top_level[module.split(".")[0]] += cumulative_us
        if module.startswith("tfbatch"):
            own_self += self_us
            own_modules[module] += self_us
    total = sum(top_level.values())
    tf = sum(v for k, v in top_level.items() if k in ("tensorflow", "keras", "tf_keras"))
    return {
        "total_import_s": total / 1e6,
        "tensorflow_keras_s": tf / 1e6,
        "tfbatch_own_self_s": own_self / 1e6,
        "top_level_s": {k: round(v / 1e6, 3) for k, v in top_level.most_common(15)},
        "tfbatch_slowest_self_s": {k: round(v / 1e6, 3) for k, v in own_modules.most_common(10)},
        "imported": sorted({r[2].strip().split(".")[0] for r in rows}),
    }


def phase_profile(archive: Path, images: Path, output: Path, rate: int = 200, src: str | None = None) -> dict[str, Any]:
    """py-spy of one whole run: every thread's busy samples (py-spy leaves idle ones out)."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    shutil.rmtree(output, ignore_errors=True)
    raw = output.parent / "startup-pyspy.txt"
    subprocess.run([spy, "record", "-o", str(raw), "-f", "raw", "-r", str(rate), "--", sys.executable,
                    *_cmd(archive, images, output)], env=_env_for(src), capture_output=True, check=True)
    phases: Counter[str] = Counter()
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            phases[_phase(stack)] += int(count)
    total = sum(phases.values())
    return {"samples": total, "rate_hz": rate,
            "seconds": {k: round(v / rate, 3) for k, v in phases.most_common()},
            "share": {k: round(v / total, 3) for k, v in phases.most_common()} if total else {}}


def _phase(stack: str) -> str:
    for phase, markers in PHASES:
        if any(m in stack for m in markers):
            return phase
    return "other"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.transform.startup", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workdir", default=str(Path(tempfile.gettempdir()) / "tfbatch-bench"))
    parser.add_argument("--out", default="benchmarks/transform/startup.json")
    parser.add_argument("--baseline-src", help="another checkout's src/ (e.g. main's): its runs alternate with "
                                                   "this checkout's in one invocation, stored as 'before' and 'after'")
    parser.add_argument("--no-profile", action="store_true", help="skip the py-spy run")
    args = parser.parse_args(argv)

    workdir = Path(args.workdir)
    archive = scriptless_archive(ensure_artifact("tiny", workdir))
    images = _one_image(workdir)
    output = workdir / "outputs" / "startup" / "out"
    output.parent.mkdir(parents=True, exist_ok=True)
    variants = {"before": args.baseline_src, "after": None} if args.baseline_src else {"this": None}
    runs: dict[str, list] = {name: [] for name in variants}
    for _ in range(args.runs):  # interleaved, so a change in the machine's load hits both alike
        for name, src in variants.items():
            runs[name].append(timed_run(archive, images, output, src))
    result: dict[str, Any] = {
        "command": "python -m benchmarks.transform.startup " + " ".join(argv if argv is not None else sys.argv[1:]),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "machine": machine(), "variants": {},
    }
    for name, src in variants.items():
        result["variants"][name] = {
            "src": src or "this checkout",
            "runs": runs[name],
            "median": {k: statistics.median(r[k] for r in runs[name]) for k in ("first_output_s", "total_s", "cpu_s")},
            "imports": import_times(archive, images, output, src),
            "phases": None if args.no_profile else phase_profile(archive, images, output, src=src),
        }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    for name, v in result["variants"].items():
        print(name, json.dumps(v["median"]), "imports:", json.dumps({k: v["imports"][k] for k in (
            "total_import_s", "tensorflow_keras_s", "tfbatch_own_self_s")}), "phases:", json.dumps(
            v["phases"] and v["phases"]["seconds"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
