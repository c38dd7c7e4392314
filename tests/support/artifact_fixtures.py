"""Artifact fixtures shared by the unit and integration tiers: placeholder SavedModel
folders (discovery and packaging only look at file names) and hand-built tar archives."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path
from typing import Callable

import pytest


def _make_fake(path: Path, pbtxt: bool = False) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / ("saved_model.pbtxt" if pbtxt else "saved_model.pb")).write_bytes(b"placeholder")
    (path / "variables").mkdir(exist_ok=True)
    (path / "variables" / "variables.index").write_bytes(b"idx")
    return path


@pytest.fixture
def fake_savedmodel() -> Callable[..., Path]:
    """fake_savedmodel(path, pbtxt=False): a folder that looks like a SavedModel."""
    return _make_fake


@pytest.fixture
def tar_builder() -> Callable[..., Path]:
    """tar_builder(path, members): write a tar.gz from (TarInfo kwargs, bytes|None) pairs."""

    def build(path: Path, members: list[tuple[dict, bytes | None]], mode: str = "w:gz") -> Path:
        with tarfile.open(path, mode) as tar:
            for fields, data in members:
                info = tarfile.TarInfo(fields.pop("name"))
                for k, v in fields.items():
                    setattr(info, k, v)
                if data is not None:
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
                else:
                    tar.addfile(info)
        return path

    return build


