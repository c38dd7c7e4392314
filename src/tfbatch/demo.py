"""The README's demo: real data in, a real batch job, accuracy out, no cloud and no download.

digits (shipped in scikit-learn) -> train a small Keras CNN -> SavedModel taking PNG bytes ->
model.tar.gz with a SageMaker-style code/inference.py -> PNG files in a local folder ->
``tfbatch transform`` -> accuracy computed from the ``.out`` files.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import numpy as np


def prediction_label(out_body: bytes) -> int:
    """The predicted class in one ``.out`` file (TFS predict response for one image)."""
    prediction = json.loads(out_body)["predictions"][0]
    if isinstance(prediction, dict):
        if "classes" in prediction:
            return int(prediction["classes"])
        prediction = prediction["probabilities"]
    return int(np.argmax(prediction))


def accuracy_from_outputs(output_dir: Path) -> tuple[float, int]:
    from tfbatch.train.digits import label_from_filename

    outs = sorted(output_dir.rglob("*.out"))
    if not outs:
        return 0.0, 0
    correct = sum(prediction_label(p.read_bytes()) == label_from_filename(p.name) for p in outs)
    return correct / len(outs), len(outs)


def run_demo(workdir: str | Path = "demo-output", *, epochs: int = 30, seed: int = 0) -> dict:
    import tensorflow as tf

    from tfbatch.artifact import package
    from tfbatch.train.digits import load_digits_split, write_png_folder
    from tfbatch.train.export import export_servable
    from tfbatch.train.inference_template import write_inference_script
    from tfbatch.train.models import build_digits_cnn
    from tfbatch.transform.job import run_transform
    from tfbatch.transform.spec import TransformSpec

    work = Path(workdir)
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    t0 = time.monotonic()
    tf.keras.utils.set_random_seed(seed)

    x_train, y_train, x_test, y_test = load_digits_split(seed=seed)
    model = build_digits_cnn()
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(x_train[..., None].astype("float32") / 255.0, y_train, epochs=epochs, batch_size=64, verbose=0)
    t_train = time.monotonic() - t0
    print(f"[demo] trained a CNN on {len(x_train)} digits in {t_train:.1f}s")

    export_servable(model, work / "export", version=1, image_size=(8, 8), channels=1)
    write_inference_script(work / "code")
    archive = package([work / "export" / "1"], work / "model.tar.gz", code_dir=work / "code")
    write_png_folder(x_test, y_test, work / "input")
    print(f"[demo] packaged {archive} and wrote {len(x_test)} held-out digits as PNG files to {work / 'input'}")

    spec = TransformSpec.build(
        model=str(archive),
        input=str(work / "input"),
        output=str(work / "output"),
        content_type="application/x-image",
    )
    report = run_transform(spec)
    accuracy, scored = accuracy_from_outputs(work / "output")
    print(
        f"[demo] tfbatch transform: {report.succeeded}/{report.objects} files in {report.seconds:.1f}s; "
        f"accuracy on {scored} held-out digits: {accuracy:.4f}"
    )
    print(f"[demo] total {time.monotonic() - t0:.1f}s; outputs in {work / 'output'}")
    return {"accuracy": accuracy, "scored": scored, "failed": report.failed}
