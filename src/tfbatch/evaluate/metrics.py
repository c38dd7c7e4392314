"""Score a batch job's predictions: accuracy, per-class precision/recall, confusion matrix.

Input is a transform output folder: one ``<input key>.out`` per image, holding the
TFS response JSON. Both response shapes a classifier produces are read:

- one output tensor:  ``{"predictions": [[p0, p1, ...]]}`` -> argmax
- several outputs:    ``{"predictions": [{"classes": k, "probabilities": [...]}]}`` ->
  ``classes`` if present, else argmax of ``probabilities`` (or ``scores``)

True labels come from the file names (``<index>_<label>.png.out``, the naming SageMaker's CIFAR-10 example uses)
or from a CSV (``file,label`` rows) / JSON (``{"file": label}``) map.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Sequence

import numpy as np
from pydantic import BaseModel

from tfbatch.errors import InvalidInput, NotFound
from tfbatch.labels import KNOWN_CLASS_NAMES, label_from_filename


class ClassScore(BaseModel):
    name: str
    precision: float
    recall: float
    support: int


class EvaluationReport(BaseModel):
    total: int
    correct: int
    accuracy: float
    class_names: list[str]
    per_class: list[ClassScore]
    confusion: list[list[int]]
    confusion_normalized: list[list[float]]
    skipped: dict[str, str] = {}


def predicted_class(document: object, source: str) -> int:
    """The class index in one TFS response document (one image)."""
    rows = document.get("predictions") if isinstance(document, dict) else None
    if rows is None and isinstance(document, dict):
        rows = document.get("outputs")
    if not isinstance(rows, list) or not rows:
        raise InvalidInput(f"{source}: expected {{'predictions': [...]}} with one row, got {str(document)[:80]}")
    if all(isinstance(v, (int, float)) for v in rows):
        row = rows  # a bare probability vector
    elif len(rows) == 1:
        row = rows[0]
    else:
        raise InvalidInput(f"{source}: expected one prediction per file, got {len(rows)}")
    if isinstance(row, dict):
        if "classes" in row:
            value = row["classes"]
            return int(value[0] if isinstance(value, list) else value)
        for key in ("probabilities", "scores", "probs"):
            if key in row:
                return int(np.argmax(row[key]))
        raise InvalidInput(f"{source}: prediction object has no 'classes' or 'probabilities': {sorted(row)}")
    if isinstance(row, list) and row and all(isinstance(v, (int, float)) for v in row):
        return int(np.argmax(row))
    raise InvalidInput(f"{source}: expected a probability vector, got {str(row)[:80]}")


def _infer_class_names(tokens: list[str]) -> list[str] | None:
    if all(t.isdigit() for t in tokens):
        return None
    # The known list naming most files wins; files it cannot name are skipped later.
    words = [t.lower() for t in tokens]
    best = max(KNOWN_CLASS_NAMES, key=lambda names: sum(w in names for w in words))
    if any(w in best for w in words):
        return list(best)
    raise InvalidInput(
        f"labels in file names {sorted(set(tokens))[:10]} are not digits or CIFAR-10 classes: "
        "pass class_names (or --class-names)"
    )


def read_label_map(path: str | Path, class_names: Sequence[str] | None) -> dict[str, int]:
    """``{input file name: class index}`` from CSV (``file,label``; header optional) or JSON."""
    source = Path(path)
    if not source.is_file():
        raise NotFound(f"labels file {source}: not found")
    if source.suffix.lower() == ".json":
        raw = json.loads(source.read_text())
        if not isinstance(raw, dict):
            raise InvalidInput(f"labels file {source}: expected a JSON object {{file: label}}")
        pairs = list(raw.items())
    else:
        with source.open(newline="") as handle:
            pairs = [(row[0], row[1]) for row in csv.reader(handle) if len(row) >= 2]
        if pairs and not str(pairs[0][1]).strip().lstrip("-").isdigit() and (
            class_names is None or pairs[0][1].strip() not in class_names
        ):
            pairs = pairs[1:]  # a header row
    names = list(class_names) if class_names is not None else None
    mapping = {}
    for key, label in pairs:
        text = str(label).strip()
        if isinstance(label, int) or text.lstrip("-").isdigit():
            mapping[Path(key).name] = int(text)
        elif names is not None and text in names:
            mapping[Path(key).name] = names.index(text)
        else:
            raise InvalidInput(f"labels file {source}: label {text!r} of {key!r} is not an integer "
                               f"or one of the class names {names}")
    return mapping


def evaluate(
    predictions_dir: str | Path,
    labels: str | Path | None = None,
    *,
    class_names: Sequence[str] | None = None,
    strict: bool = False,
) -> EvaluationReport:
    """Score every ``*.out`` under ``predictions_dir``. Files that cannot be parsed or
    have no label are listed in ``skipped`` (or raise, with ``strict``)."""
    root = Path(predictions_dir)
    if not root.is_dir():
        raise NotFound(f"predictions folder {root}: not found")
    files = sorted(p for p in root.rglob("*.out") if p.is_file())
    if not files:
        raise InvalidInput(f"predictions folder {root}: expected '*.out' files, found none")
    names = list(class_names) if class_names is not None else None
    label_map = read_label_map(labels, names) if labels is not None else None
    if label_map is None and names is None:
        tokens = [p.name.removesuffix(".out").rsplit("_", 1)[-1].rsplit(".", 1)[0] for p in files]
        names = _infer_class_names(tokens)

    actual: list[int] = []
    predicted: list[int] = []
    skipped: dict[str, str] = {}
    for path in files:
        relative = str(path.relative_to(root))
        try:
            if label_map is not None:
                key = path.name.removesuffix(".out")
                if key not in label_map:
                    raise InvalidInput(f"{relative}: no label for {key!r} in {labels}")
                truth = label_map[key]
            else:
                truth = label_from_filename(path.name, names)
            guess = predicted_class(json.loads(path.read_bytes()), relative)
        except (InvalidInput, ValueError) as exc:
            if strict:
                raise
            skipped[relative] = str(exc)
            continue
        actual.append(truth)
        predicted.append(guess)
    if not actual:
        raise InvalidInput(f"predictions folder {root}: no file could be scored; first problem: "
                           f"{next(iter(skipped.values()))}")

    count = max(max(actual), max(predicted)) + 1
    if names is None:
        names = [str(i) for i in range(count)]
    count = max(count, len(names))
    names = names + [str(i) for i in range(len(names), count)]
    matrix = np.zeros((count, count), dtype=np.int64)
    np.add.at(matrix, (np.asarray(actual), np.asarray(predicted)), 1)
    row_sums = matrix.sum(axis=1, keepdims=True)
    col_sums = matrix.sum(axis=0)
    normalized = np.divide(matrix, row_sums, out=np.zeros(matrix.shape), where=row_sums > 0)
    diagonal = np.diag(matrix)
    per_class = [
        ClassScore(
            name=names[i],
            precision=float(diagonal[i] / col_sums[i]) if col_sums[i] else 0.0,
            recall=float(diagonal[i] / row_sums[i, 0]) if row_sums[i, 0] else 0.0,
            support=int(row_sums[i, 0]),
        )
        for i in range(count)
    ]
    correct = int(diagonal.sum())
    return EvaluationReport(
        total=len(actual), correct=correct, accuracy=correct / len(actual), class_names=names,
        per_class=per_class, confusion=matrix.tolist(),
        confusion_normalized=normalized.round(6).tolist(), skipped=skipped,
    )


def write_report(report: EvaluationReport, out_dir: str | Path) -> tuple[Path, Path]:
    """Write ``evaluation.json`` and ``confusion_matrix.png``; return both paths."""
    from tfbatch.evaluate.plots import plot_confusion_matrix

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    json_path = out / "evaluation.json"
    json_path.write_text(report.model_dump_json(indent=2))
    png_path = plot_confusion_matrix(
        np.asarray(report.confusion_normalized), report.class_names, out / "confusion_matrix.png",
        title=f"Confusion matrix (accuracy {report.accuracy:.1%}, n={report.total})",
    )
    return json_path, png_path
