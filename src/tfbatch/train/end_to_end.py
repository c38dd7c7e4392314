"""Issue 5's path in one call: digits -> TFRecords -> N-worker training -> SavedModel
-> model.tar.gz with code/inference.py -> ``tfbatch transform`` over PNGs -> evaluation.

Every stage is the real one a user would run from the command line; the folder
layout under ``workdir`` is what those commands would produce::

    data/  eval-png/  run/{checkpoints,logs,export/1}  code/  model.tar.gz  predictions/
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from pydantic import BaseModel

from tfbatch.train.config import TrainConfig, TrainResult
from tfbatch.train.data import write_digits
from tfbatch.train.inference_template import write_inference_script
from tfbatch.train.launcher import train
from tfbatch.train.pipeline import Augment


class EndToEndResult(BaseModel):
    train: TrainResult
    archive: Path
    transform_seconds: float | None = None
    accuracy: float | None = None
    report_json: Path | None = None
    confusion_png: Path | None = None
    seconds: float


def package_servable(export_version_dir: Path, code_dir: Path, out: Path) -> Path:
    from tfbatch.artifact import package

    return package([export_version_dir], out, code_dir=code_dir)


def run_digits_end_to_end(
    workdir: str | Path,
    *,
    workers: int = 2,
    epochs: int = 12,
    batch_size: int = 32,
    learning_rate: float = 2e-3,
    steps_per_epoch: int | None = None,
    eval_upscale: int = 4,
    transform: bool = True,
    seed: int = 0,
) -> EndToEndResult:
    """Run the whole path; ``batch_size`` is the global batch (split across workers)."""
    started = time.monotonic()
    work = Path(workdir)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    write_digits(work / "data", seed=seed, eval_png_dir=work / "eval-png", upscale=eval_upscale)
    result = train(TrainConfig(
        data_dir=work / "data", out_dir=work / "run", workers=workers, epochs=epochs,
        batch_size=max(1, batch_size // workers), learning_rate=learning_rate,
        steps_per_epoch=steps_per_epoch, augment=Augment(pad=1, flip=False), seed=seed,
        threads_per_worker=1 if workers > 1 else None, export_include_classes=False,
    ))
    write_inference_script(work / "code")
    archive = package_servable(Path(result.export_path), work / "code", work / "model.tar.gz")
    outcome = EndToEndResult(train=result, archive=archive, seconds=0.0)
    if transform:
        from tfbatch.evaluate.metrics import evaluate, write_report
        from tfbatch.transform.job import run_transform
        from tfbatch.transform.spec import TransformSpec

        transform_started = time.monotonic()
        run_transform(TransformSpec.build(
            model=str(archive), input=str(work / "eval-png"), output=str(work / "predictions"),
            content_type="application/x-image",
        ))
        outcome.transform_seconds = time.monotonic() - transform_started
        report = evaluate(work / "predictions", strict=True)
        outcome.accuracy = report.accuracy
        outcome.report_json, outcome.confusion_png = write_report(report, work / "report")
    outcome.seconds = time.monotonic() - started
    return outcome
