"""The README's demo: real data in, a real batch job, accuracy out, no cloud and no download.

digits (shipped in scikit-learn) -> train a small Keras CNN -> SavedModel taking PNG bytes ->
model.tar.gz with a SageMaker-style code/inference.py -> PNG files in a local folder ->
``tfbatch transform`` -> ``tfbatch evaluate`` over the ``.out`` files.

Two ways to train, one way on from there (package, transform, evaluate):

- ``run_demo``: a quick in-process fit on arrays (``tfbatch demo``).
- ``run_digits_end_to_end``: the training path a user runs from the command line —
  TFRecords -> data-parallel training with N workers -> SavedModel (``tfbatch demo
  --distributed N``). Its folder layout under ``workdir`` is what those commands produce::

      data/  eval-png/  run/{checkpoints,logs,export/1}  code/  model.tar.gz  predictions/  report/
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from pydantic import BaseModel

from tfbatch.train.config import TrainResult


class EndToEndResult(BaseModel):
    train: TrainResult
    archive: Path
    transform_seconds: float | None = None
    accuracy: float | None = None
    report_json: Path | None = None
    confusion_png: Path | None = None
    seconds: float


class Scored(BaseModel):
    """What the shared tail of both demos found: the job's counts and the evaluation's."""

    succeeded: int
    objects: int
    failed: int
    transform_seconds: float
    accuracy: float
    scored: int
    report_json: Path | None = None
    confusion_png: Path | None = None


def package_servable(export_version_dir: Path, code_dir: Path, out: Path) -> Path:
    """model.tar.gz holding one SavedModel version and a freshly written code/inference.py."""
    from tfbatch.artifact import package
    from tfbatch.train.inference_template import write_inference_script

    write_inference_script(code_dir)
    return package([export_version_dir], out, code_dir=code_dir)


def transform_and_score(archive: Path, images: Path, predictions: Path, report_dir: Path | None = None) -> Scored:
    """Batch-transform the labelled PNGs in ``images``, then score the ``.out`` files."""
    from tfbatch.api import run_transform
    from tfbatch.evaluate.metrics import evaluate, write_report

    started = time.monotonic()
    report = run_transform(model=str(archive), input=str(images), output=str(predictions),
                           content_type="application/x-image")
    outcome = Scored(succeeded=report.succeeded, objects=report.objects, failed=report.failed,
                     transform_seconds=time.monotonic() - started, accuracy=0.0, scored=0)
    if any(predictions.rglob("*.out")):
        evaluation = evaluate(predictions, strict=True)
        outcome.accuracy, outcome.scored = evaluation.accuracy, evaluation.total
        if report_dir is not None:
            outcome.report_json, outcome.confusion_png = write_report(evaluation, report_dir)
    return outcome


def run_demo(workdir: str | Path = "demo-output", *, epochs: int = 30, seed: int = 0) -> dict:
    import tensorflow as tf

    from tfbatch.train.digits import load_digits_split, write_png_folder
    from tfbatch.train.export import export_servable
    from tfbatch.train.models import build_digits_cnn

    work = _fresh(workdir)
    t0 = time.monotonic()
    tf.keras.utils.set_random_seed(seed)

    x_train, y_train, x_test, y_test = load_digits_split(seed=seed)
    model = build_digits_cnn()
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(x_train[..., None].astype("float32") / 255.0, y_train, epochs=epochs, batch_size=64, verbose=0)
    t_train = time.monotonic() - t0
    print(f"[demo] trained a CNN on {len(x_train)} digits in {t_train:.1f}s")

    export_servable(model, work / "export", version=1, image_size=(8, 8), channels=1)
    archive = package_servable(work / "export" / "1", work / "code", work / "model.tar.gz")
    write_png_folder(x_test, y_test, work / "input")
    print(f"[demo] packaged {archive} and wrote {len(x_test)} held-out digits as PNG files to {work / 'input'}")

    scored = transform_and_score(archive, work / "input", work / "output")
    print(
        f"[demo] tfbatch transform: {scored.succeeded}/{scored.objects} files in {scored.transform_seconds:.1f}s; "
        f"accuracy on {scored.scored} held-out digits: {scored.accuracy:.4f}"
    )
    print(f"[demo] total {time.monotonic() - t0:.1f}s; outputs in {work / 'output'}")
    return {"accuracy": scored.accuracy, "scored": scored.scored, "failed": scored.failed}


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
    from tfbatch.train.config import TrainConfig
    from tfbatch.train.data import write_digits
    from tfbatch.train.launcher import train
    from tfbatch.train.pipeline import Augment

    started = time.monotonic()
    work = _fresh(workdir)
    write_digits(work / "data", seed=seed, eval_png_dir=work / "eval-png", upscale=eval_upscale)
    result = train(TrainConfig(
        data_dir=work / "data", out_dir=work / "run", workers=workers, epochs=epochs,
        batch_size=max(1, batch_size // workers), learning_rate=learning_rate,
        steps_per_epoch=steps_per_epoch, augment=Augment(pad=1, flip=False), seed=seed,
        threads_per_worker=1 if workers > 1 else None, export_include_classes=False,
    ))
    archive = package_servable(Path(result.export_path), work / "code", work / "model.tar.gz")
    outcome = EndToEndResult(train=result, archive=archive, seconds=0.0)
    if transform:
        scored = transform_and_score(archive, work / "eval-png", work / "predictions", work / "report")
        outcome.transform_seconds = scored.transform_seconds
        outcome.accuracy = scored.accuracy
        outcome.report_json, outcome.confusion_png = scored.report_json, scored.confusion_png
    outcome.seconds = time.monotonic() - started
    return outcome


def _fresh(workdir: str | Path) -> Path:
    work = Path(workdir)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    return work
