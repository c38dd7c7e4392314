"""``--precision bf16`` vs fp32 on MobileNetV2: speed and top-1 agreement, same job, same run.

Runs ``tfbatch transform`` on a scriptless MobileNetV2 archive (:mod:`benchmarks.common.models`:
string input, JPEG decoded in the graph; random weights with BatchNorm statistics set from real
photos, see :func:`calibrate_batchnorm`: same compute as trained ones, decided answers) over
~22 KB JPEGs, alternating fp32 and bf16 (ABBA per round, so drift in the shared machine's load
falls on both), and compares every bf16 output with the fp32 one of the same round.
bf16 needs AVX512-BF16 or AMX (tfbatch refuses it elsewhere), or a GPU for fp16.

    python -m benchmarks.transform.bf16 --images 500 --rounds 1 --out benchmarks/transform/bf16.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from statistics import median

import numpy as np


@dataclass
class _Job:
    a: list[str]
    records: int
    objects: int


def calibrate_batchnorm(model, images) -> None:
    """Give every BatchNorm layer the mean and variance its input has on ``images``.

    With random weights and the initial statistics (mean 0, variance 1), MobileNetV2's
    activations shrink to nothing over its depth and every image gets the same flat
    softmax (0.001 for each of 1,000 classes): a top-1 comparison would be vacuous. Setting
    the statistics from real photos, layer by layer from the input, keeps activations at unit
    scale, so images get distinct, decided answers: weights made locally, nothing downloaded.
    """
    import keras
    import numpy as np

    for layer in model.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            inputs = keras.Model(model.inputs, layer.input)(images, training=False)
            axes = tuple(range(len(inputs.shape) - 1))
            mean = np.mean(inputs, axis=axes)
            var = np.var(inputs, axis=axes)
            gamma, beta, _, _ = layer.get_weights()
            layer.set_weights([gamma, beta, mean, var])


def calibrated_artifact(name: str, workdir: Path, inputs: Path, count: int = 32) -> Path:
    """``<workdir>/models/<name>-calibrated/``: the benchmark model with BatchNorm statistics
    from the first ``count`` JPEGs (:func:`calibrate_batchnorm`); built once."""
    import json as _json

    import tensorflow as tf

    from benchmarks.common.models import IMAGE_SIZE, decode_and_resize, export_savedmodel
    from tfbatch.artifact import package

    folder = workdir / "models" / f"{name}-calibrated"
    archive = folder / "model-noscript.tar.gz"
    if archive.exists():
        return archive
    files = sorted(inputs.iterdir())[:count]
    batch = tf.stack([decode_and_resize(tf.io.read_file(str(f)), IMAGE_SIZE) for f in files])
    savedmodel = export_savedmodel(name, folder / "savedmodel" / "1", prepare=lambda m: calibrate_batchnorm(m, batch))
    package([savedmodel], folder / "partial.tar.gz", versions=[1])
    os.replace(folder / "partial.tar.gz", archive)
    (folder / "meta.json").write_text(_json.dumps({"name": name, "calibration_images": count}))
    return archive


def _confidence(rows: dict[str, list[list[float]]]) -> dict[str, float]:
    """How decided fp32's answers are: random weights give near-flat softmax rows, where a
    rounding-sized change can swap the top two classes."""
    top = np.array([sorted(r, reverse=True)[:2] for rs in rows.values() for r in rs])
    return {"median_top1_prob": float(np.median(top[:, 0])), "median_top1_margin": float(np.median(top[:, 0] - top[:, 1]))}


def agreement_by_margin(reference: dict[str, list[list[float]]], other: dict[str, list[list[float]]],
                        thresholds=(0.0, 0.0002, 0.0005, 0.001)) -> list[dict]:
    """Top-1 agreement among the rows whose reference top-1 leads its runner-up by more than
    each threshold: a flip where the lead is below the reduced precision's error is expected."""
    margins, same = [], []
    for key in sorted(set(reference) & set(other)):
        for ref, got in zip(reference[key], other[key]):
            top = sorted(ref, reverse=True)
            margins.append(top[0] - top[1])
            same.append(int(np.argmax(ref)) == int(np.argmax(got)))
    margins_a, same_a = np.array(margins), np.array(same)
    return [{"margin_over": t, "rows": int((margins_a > t).sum()),
             "same_top1": float(same_a[margins_a > t].mean()) if (margins_a > t).any() else None} for t in thresholds]


def main(argv: list[str] | None = None) -> int:
    from benchmarks.common.models import ensure_artifact, scriptless_archive
    from benchmarks.transform import shape_runner
    from benchmarks.transform.bench import machine
    from benchmarks.transform.shape_data import jpegs
    from benchmarks.transform.shape_outputs import agreement

    parser = argparse.ArgumentParser(prog="python -m benchmarks.transform.bf16", description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--model", default="mobilenet_v2")
    parser.add_argument("--precision", default="bf16", help="the reduced precision to compare with fp32")
    parser.add_argument("--workdir", default=str(Path(tempfile.gettempdir()) / "tfbatch-bench-shapes"))
    parser.add_argument("--out", default="benchmarks/transform/bf16.json")
    parser.add_argument("--no-calibrate", dest="calibrate", action="store_false",
                        help="the plain random-weight model (flat softmax: top-1 agreement means nothing)")
    parser.add_argument("--note", default="")
    args = parser.parse_args(argv)
    workdir = Path(args.workdir)
    inputs = jpegs(workdir, args.images)
    archive = (calibrated_artifact(args.model, workdir, inputs) if args.calibrate
               else scriptless_archive(ensure_artifact(args.model, workdir)))
    result: dict = {"command": "python -m benchmarks.transform.bf16 " + " ".join(argv or sys.argv[1:]),
                    "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "machine": machine(), "note": args.note,
                    "load_average_before": os.getloadavg(), "runs": [], "rounds": []}
    for round_no in range(args.rounds):
        rows: dict[str, dict] = {}
        for n, precision in enumerate(("fp32", args.precision, args.precision, "fp32")):
            job = _Job([sys.executable, "-m", "tfbatch", "transform", "--model", str(archive), "--input", str(inputs),
                        "--content-type", "application/x-image", "--precision", precision], args.images, args.images)
            run = shape_runner.run("a", job, workdir / "bf16" / f"{precision}-{n}", workdir / "logs",
                                   f"bf16-{precision}-{n}", 1800)
            rows.setdefault(precision, run["_rows"])
            run = {k: v for k, v in run.items() if k != "_rows"}
            result["runs"].append({**run, "precision": precision, "round": round_no, "position": n})
            print(f"[{precision}] ok={run['ok']} {run['steady_per_s'] or 0:.1f} img/s steady, "
                  f"{run['end_to_end_per_s'] or 0:.1f} whole, CPU {run['steady_cpu_ms_per_record'] or 0:.2f} ms/img", flush=True)
        agree = agreement(rows["fp32"], rows[args.precision])
        result["rounds"].append({"agreement": agree, "fp32_confidence": _confidence(rows["fp32"]),
                                 "by_fp32_margin": agreement_by_margin(rows["fp32"], rows[args.precision])})
    ok = [r for r in result["runs"] if r["ok"]]

    def med(precision: str, key: str) -> float | None:
        values = [r[key] for r in ok if r["precision"] == precision and r[key] is not None]
        return median(values) if values else None

    result["summary"] = {p: {k: med(p, k) for k in ("steady_per_s", "end_to_end_per_s", "steady_cpu_ms_per_record")}
                         for p in ("fp32", args.precision)}
    s32, s16 = result["summary"]["fp32"]["steady_per_s"], result["summary"][args.precision]["steady_per_s"]
    result["summary"]["speedup_steady"] = s16 / s32 if s32 and s16 else None
    result["load_average_after"] = os.getloadavg()
    Path(args.out).write_text(json.dumps(result, indent=1, default=str))
    print(json.dumps({"summary": result["summary"], "rounds": result["rounds"]}, indent=1))
    return 0 if len(ok) == len(result["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
