"""Confusion-matrix heatmap (matplotlib, headless Agg backend)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from tfbatch.errors import DependencyMissing


def plot_confusion_matrix(
    normalized: np.ndarray, class_names: Sequence[str], path: str | Path, *, title: str = "Confusion matrix"
) -> Path:
    """Row-normalised matrix as an annotated heatmap: rows = actual, columns = predicted,
    so the diagonal reads as per-class recall (as SageMaker's CIFAR-10 example plots it)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise DependencyMissing("plotting needs matplotlib: pip install 'tfbatch[plots]'") from exc

    size = len(class_names)
    figure, axes = plt.subplots(figsize=(1.0 + 0.7 * size, 0.8 + 0.6 * size), dpi=100)
    try:
        image = axes.imshow(normalized, cmap="YlGnBu", vmin=0.0, vmax=1.0)
        figure.colorbar(image, ax=axes, fraction=0.046, pad=0.04)
        axes.set_xticks(range(size), labels=list(class_names), rotation=45, ha="right")
        axes.set_yticks(range(size), labels=list(class_names))
        axes.set_xlabel("Predictions")
        axes.set_ylabel("Actuals")
        axes.set_title(title)
        for row in range(size):
            for column in range(size):
                value = normalized[row, column]
                axes.text(column, row, f"{value:.2f}", ha="center", va="center", fontsize=7,
                          color="white" if value > 0.6 else "black")
        figure.tight_layout()
        out = Path(path)
        figure.savefig(out, format="png")
    finally:
        plt.close(figure)
    return out
