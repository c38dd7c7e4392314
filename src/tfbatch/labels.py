"""Image files that carry their label in their name: ``<index>_<label>.png``.

Training writes evaluation images named this way (so a batch job's ``<name>.out`` files
still carry the truth), and evaluation reads the label back. Both sides, and the class
names of the datasets tfbatch knows, live here so that neither imports the other.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Sequence

from tfbatch.errors import InvalidInput

DIGIT_CLASS_NAMES: list[str] = [
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
]
CIFAR10_CLASS_NAMES: list[str] = [
    "airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck",
]
KNOWN_CLASS_NAMES: tuple[list[str], ...] = (DIGIT_CLASS_NAMES, CIFAR10_CLASS_NAMES)

# `<anything>_<label>.png[.out]`; the label token is a class name or an integer.
_LABEL_RE = re.compile(r"_([A-Za-z]+|\d+)\.(?:png|jpe?g)(?:\.out)?$", re.IGNORECASE)


def image_filename(index: int, label: int, class_names: Sequence[str] | None = None) -> str:
    """``<index>_<classname>.png`` (zero-padded index so listings sort in index order)."""
    names = DIGIT_CLASS_NAMES if class_names is None else class_names
    return f"{index:05d}_{names[int(label)]}.png"


def label_from_filename(name: str, class_names: Sequence[str] | None = None) -> int:
    """The label encoded in ``<index>_<label>.png`` (also ``.png.out``); class name or integer."""
    base = Path(name).name
    match = _LABEL_RE.search(base)
    if match is None:
        raise InvalidInput(
            f"file name {base!r}: expected '<index>_<label>.png' (optionally '.out'), "
            "label a class name or an integer"
        )
    token = match.group(1)
    if token.isdigit():
        return int(token)
    names = [n.lower() for n in (DIGIT_CLASS_NAMES if class_names is None else class_names)]
    try:
        return names.index(token.lower())
    except ValueError:
        raise InvalidInput(
            f"file name {base!r}: label {token!r} is not one of the class names {names}"
        ) from None
