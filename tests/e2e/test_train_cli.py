from __future__ import annotations

import json

import pytest

from tfbatch.evaluate.cli import main_evaluate
from tfbatch.train.cli import main_data, main_train
from tfbatch.train.dataset_info import read_info
from tfbatch.demo import run_digits_end_to_end


def test_data_and_train_commands(tmp_path, capsys):
    assert main_data(["digits", "--out", str(tmp_path / "data"), "--eval-png", str(tmp_path / "png")]) == 0
    assert read_info(tmp_path / "data").counts["eval"] == 450
    assert len(list((tmp_path / "png").glob("*_*.png"))) == 450
    capsys.readouterr()
    assert main_train([
        "--data", str(tmp_path / "data"), "--out", str(tmp_path / "run"), "--epochs", "1",
        "--steps-per-epoch", "5", "--pad", "0", "--no-flip", "--probabilities-only",
    ]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["steps"] == 5 and result["model"] == "digits"
    assert (tmp_path / "run" / "export" / "1" / "saved_model.pb").is_file()


@pytest.mark.slow
def test_digits_two_workers_package_transform_evaluate(tmp_path):
    """The issue's path at a small size: 2 workers, then the packaged artifact scored by
    tfbatch transform over PNG files and evaluated from their names."""
    result = run_digits_end_to_end(tmp_path / "e2e", workers=2, epochs=6)
    assert result.train.workers == 2
    assert result.accuracy >= 0.95
    assert result.confusion_png.is_file() and result.archive.is_file()
    assert len(list((tmp_path / "e2e" / "predictions").glob("*.png.out"))) == 450
    assert main_evaluate(["--predictions", str(tmp_path / "e2e" / "predictions"),
                          "--out", str(tmp_path / "report")]) == 0
    report = json.loads((tmp_path / "report" / "evaluation.json").read_text())
    assert report["total"] == 450 and report["accuracy"] == pytest.approx(result.accuracy)
    assert (tmp_path / "report" / "confusion_matrix.png").is_file()
