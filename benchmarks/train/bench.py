"""Training throughput (images/s) for 1 vs N local workers, written as JSON.

Usage::

    python -m benchmarks.train.bench --dataset digits --workers 1 2 \
        --steps 200 --out benchmarks/train_throughput.json

Each configuration is a real ``tfbatch train`` run (separate worker processes,
MultiWorkerMirroredStrategy for N > 1) with the same global batch, so the numbers
answer "does adding workers on this machine make an epoch faster". Reported images/s
is the chief's own measurement over the run's steps (graph tracing included, start-up
excluded); wall seconds, including process start and export, are reported alongside.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import tempfile
import time
from pathlib import Path
from typing import Sequence

from benchmarks.common.report import print_and_save
from tfbatch.train.config import TrainConfig
from tfbatch.train.data import write_cifar10, write_digits
from tfbatch.train.launcher import train
from tfbatch.train.pipeline import Augment


def measure(data_dir: Path, workers: int, *, steps: int, global_batch: int, work: Path,
            model: str = "auto", augment: Augment | None = None) -> dict:
    out = work / f"run-{workers}"
    shutil.rmtree(out, ignore_errors=True)
    config = TrainConfig(
        data_dir=data_dir, out_dir=out, workers=workers, epochs=1, steps_per_epoch=steps,
        batch_size=max(1, global_batch // workers), model=model,
        augment=augment or Augment(pad=1, flip=False),
        threads_per_worker=max(1, (os.cpu_count() or 1) // workers),
    )
    started = time.monotonic()
    result = train(config)
    return {
        "workers": workers, "steps": steps, "global_batch": result.global_batch_size,
        "images_per_second": round(result.images_per_second, 1),
        "train_seconds": round(result.train_seconds, 2),
        "wall_seconds": round(time.monotonic() - started, 2), "model": result.model,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="digits", help="'digits', or a cifar-10-python.tar.gz path")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--global-batch", type=int, default=64)
    parser.add_argument("--out", help="write the results JSON here")
    args = parser.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="tfbatch-train-bench-"))
    try:
        if args.dataset == "digits":
            write_digits(work / "data")
        else:
            write_cifar10(args.dataset, work / "data")
        runs = [measure(work / "data", n, steps=args.steps, global_batch=args.global_batch, work=work)
                for n in args.workers]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report = {
        "benchmark": "train_throughput", "dataset": args.dataset, "cpu_count": os.cpu_count(),
        "machine": platform.platform(), "runs": runs,
    }
    print_and_save(report, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
