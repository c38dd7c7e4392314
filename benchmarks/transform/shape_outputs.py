"""Reading and judging what the shape benchmark's contenders wrote (pure Python + NumPy).

Every contender writes one ``<input name>.out`` per input object. Inside, whatever the
framing (one TFS JSON answer, or one per line when AssembleWith is Line, or one per
MultiRecord payload), the rows are read back in order as float vectors, so two contenders
agree when each object has the same number of rows and each row the same numbers within
float rounding, whatever way they grouped the rows into answers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

# Rows may differ by this much and still count as the same prediction: float32 sums in a
# different batch order, JSON's shortest repr vs 6 digits, and a different resize kernel
# rounding pixels differently (the float-input shape) all stay well under it.
ROW_TOLERANCE = 0.02


def rows_of_answer(answer: Any) -> list[list[float]]:
    """The prediction rows of one TFS answer, each as a flat list of floats."""
    if isinstance(answer, dict):
        if "SageMakerOutput" in answer:  # JoinSource=Input on JSON: the prediction beside the input
            return rows_of_answer(answer["SageMakerOutput"])
        for key in ("predictions", "outputs", "results"):
            if key in answer:
                return rows_of_answer(answer[key])
        raise ValueError(f"an answer object without predictions/outputs/results: keys {sorted(answer)[:5]}")
    if not isinstance(answer, list):
        raise ValueError(f"expected a list of rows, got {type(answer).__name__}")
    return [_row(item) for item in answer]


def _row(item: Any) -> list[float]:
    if isinstance(item, dict):  # a multi-output signature: the probabilities are the row
        for key in ("probabilities", "scores", "output_0"):
            if key in item:
                return [float(v) for v in np.ravel(item[key])]
        numeric = [v for k, v in sorted(item.items()) if isinstance(v, list)]
        if not numeric:
            raise ValueError(f"a row object without a list of numbers: keys {sorted(item)[:5]}")
        return [float(v) for v in np.ravel(numeric[0])]
    return [float(v) for v in np.ravel(item)]


def rows_of_text(text: str) -> list[list[float]]:
    """Rows of one output object: a single JSON answer, or one JSON answer per line."""
    text = text.strip()
    if not text:
        return []
    try:
        return rows_of_answer(json.loads(text))
    except json.JSONDecodeError:
        rows: list[list[float]] = []
        for n, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                try:
                    rows += rows_of_answer(json.loads(line))
                except json.JSONDecodeError as exc:
                    rows.append(_csv_row(line, n, exc))
        return rows


def _csv_row(line: str, n: int, why: Exception) -> list[float]:
    """A JoinSource=Input CSV row: the input's columns then the prediction's, or an id (a first
    cell that is not a number) then the prediction's."""
    cells = line.split(",")
    try:
        float(cells[0])
    except ValueError:
        cells = cells[1:]
    try:
        if cells:
            return [float(cell) for cell in cells]
    except ValueError:
        pass
    raise ValueError(f"line {n} is neither JSON nor a CSV row of numbers: {why}") from why


def read_outputs(folder: str | Path) -> dict[str, list[list[float]]]:
    """``{relative .out name: rows}`` for every ``*.out`` under ``folder`` (tfbatch's own
    ``_tfbatch/`` bookkeeping is not output)."""
    root = Path(folder)
    return {str(p.relative_to(root)): rows_of_text(p.read_text())
            for p in sorted(root.rglob("*.out")) if "_tfbatch" not in p.parts}


def agreement(reference: dict[str, list[list[float]]], other: dict[str, list[list[float]]]) -> dict[str, Any]:
    """Objects and rows in common, rows whose top-1 class matches, the largest |difference|,
    and ``same``: every object present in both with the same rows within ROW_TOLERANCE."""
    missing = sorted(set(reference) - set(other))
    extra = sorted(set(other) - set(reference))
    rows = same_top1 = 0
    worst = 0.0
    row_count_mismatch = []
    for key in sorted(set(reference) & set(other)):
        ref, got = reference[key], other[key]
        if len(ref) != len(got):
            row_count_mismatch.append(key)
            continue
        for a, b in zip(ref, got):
            rows += 1
            if len(a) != len(b):
                worst = float("inf")
                continue
            same_top1 += int(np.argmax(a) == np.argmax(b))
            if a:
                worst = max(worst, float(np.max(np.abs(np.asarray(a) - np.asarray(b)))))
    same = not missing and not extra and not row_count_mismatch and rows > 0 and worst <= ROW_TOLERANCE
    return {"objects": len(set(reference) & set(other)), "rows": rows, "same_top1": same_top1,
            "max_abs_diff": worst, "missing": missing[:3], "extra": extra[:3],
            "row_count_mismatch": row_count_mismatch[:3], "same": same}


def steady_rate(finished: list[tuple[float, int]], skip_fraction: float = 0.1) -> tuple[float | None, float | None, int]:
    """Records per second after warm-up, from ``(finish time, records)`` per output object.

    The window opens when the first ``skip_fraction`` of all records are done (at the finish
    time of the object that crosses that mark) and closes at the last finish; it counts the
    records of objects finished strictly after it opens, so a writer that lands many objects
    at one instant is not credited for them. Returns (rate, window start, records counted).
    """
    if not finished:
        return None, None, 0
    ordered = sorted(finished)
    total = sum(n for _, n in ordered)
    mark, seen, start = skip_fraction * total, 0, ordered[0][0]
    for t, n in ordered:
        seen += n
        start = t
        if seen >= mark:
            break
    counted = sum(n for t, n in ordered if t > start)
    span = ordered[-1][0] - start
    if span <= 0 or not counted:
        return None, start, counted
    return counted / span, start, counted


def ratio(x: float | None, y: float | None) -> float | None:
    return None if not x or not y else x / y
