"""Which numeric versions of a model to serve, and the states a version goes through.

A version policy is TF Serving's ``model_version_policy`` written as one string:

    latest          the newest version (TF Serving's default)
    latest:N        the N newest versions
    specific:1,3    exactly these versions (those present; a missing one is logged)
    all             every version present

States are TF Serving's ``ModelVersionStatus.State`` names, as GetModelStatus reports them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

LOADING = "LOADING"
AVAILABLE = "AVAILABLE"
UNLOADING = "UNLOADING"
END = "END"

_SAVED_MODEL_FILES = ("saved_model.pb", "saved_model.pbtxt")
_POLICY_FORMS = "'latest', 'latest:N', 'specific:V1,V2,...' or 'all'"


@dataclass(frozen=True)
class VersionPolicy:
    kind: str = "latest"  # latest | specific | all
    count: int = 1
    versions: frozenset[int] = frozenset()

    @classmethod
    def parse(cls, text: str) -> VersionPolicy:
        """A policy from its string form; ValueError says which forms exist."""
        kind, _, arg = text.strip().partition(":")
        kind = kind.strip().lower()
        arg = arg.strip()
        try:
            if kind == "all" and not arg:
                return cls("all")
            if kind == "latest":
                count = int(arg) if arg else 1
                if count >= 1:
                    return cls("latest", count=count)
            if kind == "specific" and arg:
                versions = frozenset(int(v) for v in arg.split(","))
                if all(v >= 0 for v in versions):
                    return cls("specific", versions=versions)
        except ValueError:
            pass
        raise ValueError(f"model version policy {text!r} is not one of {_POLICY_FORMS}")

    def select(self, available: set[int] | list[int]) -> set[int]:
        """The versions among ``available`` to serve."""
        present = set(available)
        if self.kind == "all":
            return present
        if self.kind == "specific":
            return present & self.versions
        return set(sorted(present)[-self.count:]) if present else set()

    def __str__(self) -> str:
        if self.kind == "specific":
            return "specific:" + ",".join(map(str, sorted(self.versions)))
        return "all" if self.kind == "all" else f"latest:{self.count}"


def scan_versions(base_path: str | Path) -> dict[int, Path]:
    """Numeric subfolders of ``base_path`` that hold a complete SavedModel.

    A folder still being copied in has no ``saved_model.pb`` yet (writers put it last, as TF
    does) and is picked up by a later scan. Two spellings of one number ("1", "01") keep the
    first in sorted order; the artifact check at start-up already refuses such a folder.
    """
    found: dict[int, Path] = {}
    try:
        entries = sorted(os.scandir(base_path), key=lambda e: e.name)
    except OSError:
        return found
    for entry in entries:
        if entry.name.isdigit() and entry.name.isascii() and entry.is_dir():
            path = Path(entry.path)
            if any((path / f).is_file() for f in _SAVED_MODEL_FILES):
                found.setdefault(int(entry.name), path)
    return found
