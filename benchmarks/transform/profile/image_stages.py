"""The image shapes' py-spy profiles (from :mod:`.shape_stages`) as shares of the CPU per image.

``shape_stages`` charges a sample to the first stage in its priority list with a marker in
any frame, and the TensorFlow calls of tfbatch's own image decoder (records/imagedecode.py)
have ``tensorflow/python`` frames, so it files them under the model call. Issue 21's budget
("no stage but decode and the model above 15 % of the CPU per image") needs the two apart,
so this re-reads the same raw files with the decoder's frames put in the decode stage first,
and divides each stage's thread-ms per record by the job's steady CPU ms per record (the
shape bench's load-robust figure; pass it per shape). Thread-ms include time a thread spent
in a system call or waiting for the GIL, so the shares are upper bounds on each stage's CPU.

    python -m benchmarks.transform.profile.image_stages --workdir /tmp/image-bench \\
        --stages benchmarks/transform/profile/image-stages-after.json \\
        --cpu jpeg-bytes=0.73,jpeg-float=1.53,recordio=0.68
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

from benchmarks.transform.profile import shape_stages as base
from benchmarks.transform.profile.pyspy_raw import samples, split_process

DECODE = "image decode + resize on host (PIL, header checks)"


def stage_of(frames: list[str]) -> str:
    if any("records/imagedecode.py" in f for f in frames) and base.stage_of(frames) not in base.APART:
        return DECODE
    return base.stage_of(frames)


def shares(raw: str, rate: float, records: int, steady_cpu_ms: float) -> dict[str, tuple[float, float]]:
    by_stage: Counter[str] = Counter()
    for frames, n in samples(raw):
        by_stage[stage_of(split_process(frames)[1])] += n
    out = {}
    for stage, n in by_stage.most_common():
        if stage in base.APART:
            continue
        ms = 1000 * n / rate / records
        out[stage] = (round(ms, 3), round(ms / steady_cpu_ms, 3))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.transform.profile.image_stages",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", required=True, help="shape_stages' --workdir (holds profile/<shape>.raw)")
    parser.add_argument("--stages", required=True, help="shape_stages' --out JSON (records, rate)")
    parser.add_argument("--cpu", required=True, help="shape=steady CPU ms per record, comma separated")
    parser.add_argument("--rate", type=int, default=100)
    args = parser.parse_args(argv)
    result = json.loads(Path(args.stages).read_text())
    cpu = {k: float(v) for k, v in (item.split("=") for item in args.cpu.split(","))}
    table: dict[str, dict] = {}
    for name, entry in result["shapes"].items():
        if name in cpu:
            table[name] = shares(str(Path(args.workdir) / "profile" / f"{name}.raw"), args.rate, entry["records"],
                                 cpu[name])
    stages = sorted({s for t in table.values() for s in t}, key=lambda s: -max(t.get(s, (0, 0))[1] for t in table.values()))
    lines = ["| stage | " + " | ".join(table) + " |", "|---|" + "---:|" * len(table)]
    for stage in stages:
        cells = [f"{t[stage][0]:.3f} ({100 * t[stage][1]:.0f}%)" if stage in t else "" for t in table.values()]
        lines.append(f"| {stage} | " + " | ".join(cells) + " |")
    lines.append("| **steady CPU ms/record (shape bench)** | " + " | ".join(f"{cpu[n]:.2f}" for n in table) + " |")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
