from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from tfbatch.errors import InvalidInput
from tfbatch.evaluate.metrics import evaluate, predicted_class, write_report

CIFAR = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


def _one_hot(k, n=3):
    v = [0.05] * n
    v[k] = 0.9
    return v


def _write(folder, name, document):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.out").write_text(json.dumps(document))


# (file label, predicted class): class 0 3/3 right; class 1 1/2 right (one -> 2); class 2 1/1
CASES = [(0, 0), (0, 0), (0, 0), (1, 1), (1, 2), (2, 2)]


def test_both_response_shapes_and_filename_labels(tmp_path):
    for i, (truth, guess) in enumerate(CASES):
        document = ({"predictions": [_one_hot(guess)]} if i % 2 else
                    {"predictions": [{"classes": guess, "probabilities": _one_hot(guess)}]})
        _write(tmp_path / "sub" if i == 0 else tmp_path, f"{i:05d}_{truth}.png", document)
    report = evaluate(tmp_path, strict=True)
    assert report.total == 6 and report.correct == 5
    assert report.accuracy == pytest.approx(5 / 6)
    assert report.confusion == [[3, 0, 0], [0, 1, 1], [0, 0, 1]]
    assert report.confusion_normalized[1] == [0.0, 0.5, 0.5]
    scores = {s.name: s for s in report.per_class}
    assert scores["1"].recall == 0.5 and scores["1"].precision == 1.0
    assert scores["2"].precision == 0.5 and scores["2"].recall == 1.0
    assert scores["0"].support == 3


def test_seed_naming_with_class_names_is_inferred(tmp_path):
    _write(tmp_path, "1_cat.png", {"predictions": [_one_hot(3, 10)]})
    _write(tmp_path, "2_dog.png", {"predictions": [_one_hot(3, 10)]})
    _write(tmp_path, "3_seven.png", {"predictions": [_one_hot(3, 10)]})  # not CIFAR: skipped
    report = evaluate(tmp_path)
    assert report.class_names == CIFAR and report.total == 2 and report.accuracy == 0.5
    assert list(report.skipped) == ["3_seven.png.out"]
    with pytest.raises(InvalidInput, match="not one of the class names"):
        evaluate(tmp_path, strict=True)


def test_csv_and_json_label_maps(tmp_path):
    preds = tmp_path / "preds"
    _write(preds, "a.jpg", {"predictions": [_one_hot(1)]})
    _write(preds, "b.jpg", {"predictions": [_one_hot(0)]})
    (tmp_path / "labels.csv").write_text("file,label\na.jpg,1\nb.jpg,2\n")
    (tmp_path / "labels.json").write_text(json.dumps({"a.jpg": "y", "b.jpg": "x"}))
    by_csv = evaluate(preds, tmp_path / "labels.csv", class_names=["x", "y", "z"])
    assert by_csv.accuracy == 0.5 and by_csv.confusion[2][0] == 1
    by_json = evaluate(preds, tmp_path / "labels.json", class_names=["x", "y", "z"])
    assert by_json.accuracy == 1.0
    (tmp_path / "partial.csv").write_text("a.jpg,1\n")
    assert evaluate(preds, tmp_path / "partial.csv").skipped == {
        "b.jpg.out": f"b.jpg.out: no label for 'b.jpg' in {tmp_path / 'partial.csv'}"}


def test_predicted_class_rejects_what_it_cannot_read():
    assert predicted_class({"predictions": [0.1, 0.7, 0.2]}, "x") == 1
    assert predicted_class({"predictions": [{"classes": [4]}]}, "x") == 4
    with pytest.raises(InvalidInput, match="one prediction per file"):
        predicted_class({"predictions": [[1, 0], [0, 1]]}, "x")
    with pytest.raises(InvalidInput, match="expected"):
        predicted_class({"error": "boom"}, "x")


def test_report_json_and_heatmap(tmp_path):
    for i, (truth, guess) in enumerate(CASES):
        _write(tmp_path / "preds", f"{i}_{truth}.png", {"predictions": [_one_hot(guess)]})
    report = evaluate(tmp_path / "preds")
    json_path, png_path = write_report(report, tmp_path / "report")
    assert json.loads(json_path.read_text())["accuracy"] == pytest.approx(5 / 6)
    image = np.asarray(Image.open(png_path).convert("RGB")).astype(int)
    assert image.shape[0] > 100 and image.shape[1] > 100
    # a real heatmap: dark (high) cells and light cells both present
    assert image.min() < 80 and image.max() > 240
