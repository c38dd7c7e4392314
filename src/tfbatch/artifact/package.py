"""Build the ``model.tar.gz`` users upload to SageMaker today, reproducibly.

The archive is byte-identical for identical inputs (sorted members, fixed mtime,
owner 0, normalised modes, no file name or time in the gzip header), so a rebuilt
artifact hashes the same and caches keyed on it stay valid.
"""

from __future__ import annotations

import gzip
import io
import os
import stat
import tarfile
import tempfile
from pathlib import Path

from tfbatch.errors import ArtifactError, InvalidInput
from tfbatch.artifact.discover import find_versions, is_saved_model_dir

# 1980-01-01: a fixed time that every archive tool and zip-compatible consumer accepts.
FIXED_MTIME = 315532800
_SKIP = {"__pycache__", ".DS_Store"}


def _walk(src: Path, arc_prefix: str, entries: dict[str, Path]) -> None:
    """Add ``src`` and everything below it, as ``arc_prefix/...``, following symlinks."""
    seen: set[str] = set()
    stack = [(src, arc_prefix)]
    while stack:
        path, arc = stack.pop()
        real = os.path.realpath(path)
        if path.is_dir():
            if real in seen:  # a link loop would otherwise recurse forever
                continue
            seen.add(real)
            entries[arc] = path
            for child in sorted(path.iterdir(), key=lambda p: p.name):
                if child.name in _SKIP or child.name.endswith(".pyc"):
                    continue
                stack.append((child, f"{arc}/{child.name}"))
        elif path.is_file():
            entries[arc] = path
        elif path.is_symlink():
            raise ArtifactError(f"'{path}' is a broken symlink; cannot package it")


def _model_sources(src: Path, version: int | None) -> list[tuple[str, Path]]:
    """(version dir name, folder) pairs for one input."""
    if not src.is_dir():
        raise ArtifactError(
            f"'{src}' is not a directory; expected a SavedModel folder (with saved_model.pb) "
            "or a folder of numeric version directories"
        )
    if is_saved_model_dir(src):
        v = 1 if version is None else int(version)
        if v < 0:
            raise InvalidInput(f"version for '{src}' must be a non-negative integer, got {version}")
        return [(str(v), src)]
    versions = find_versions(src)
    if not versions:
        raise ArtifactError(
            f"'{src}' holds no saved_model.pb and no numeric version directories with one; "
            "expected a SavedModel folder (saved_model.pb, variables/) or <version>/saved_model.pb inside it"
        )
    if version is not None:
        if int(version) not in versions:
            raise ArtifactError(
                f"'{src}' has no version {version}; it holds versions {', '.join(map(str, versions))}"
            )
        versions = {int(version): versions[int(version)]}
    # Keep the folder names as they are ("0001" stays "0001"): discovery reads both.
    return [(p.name, p) for p in versions.values()]


def _check_name(name: str) -> None:
    if not name or "/" in name or "\\" in name or name in (".", "..", "code") or name.startswith("."):
        raise InvalidInput(f"model name {name!r} is not usable as a folder name in the archive")
    if name.isdigit():
        raise InvalidInput(f"model name {name!r} is all digits and would be read as a version number")


def _default_names(sources: list[Path]) -> list[str]:
    names = [p.resolve().name for p in sources]
    for p, n in zip(sources, names):
        if n.isdigit() or n in ("", "code"):
            raise InvalidInput(f"cannot name the model in '{p}' after its folder {n!r}; pass names=")
    if len(set(names)) != len(names):
        raise InvalidInput(f"model folders share names {names}; pass names= to tell them apart")
    return names


def _tarinfo(arc: str, path: Path) -> tarfile.TarInfo:
    info = tarfile.TarInfo(arc)
    info.mtime = FIXED_MTIME
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    if path.is_dir():
        info.type = tarfile.DIRTYPE
        info.mode = 0o755
    else:
        info.type = tarfile.REGTYPE
        info.size = path.stat().st_size
        info.mode = 0o755 if path.stat().st_mode & stat.S_IXUSR else 0o644
    return info


def _write(out: Path, entries: dict[str, Path]) -> None:
    compress = not out.name.lower().endswith(".tar")
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    try:
        with os.fdopen(fd, "wb") as raw:
            gz = gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) if compress else None
            sink: io.RawIOBase = gz if gz is not None else raw
            with tarfile.open(fileobj=sink, mode="w", format=tarfile.PAX_FORMAT) as tar:
                for arc in sorted(entries):
                    path = entries[arc]
                    info = _tarinfo(arc, path)
                    if info.isdir():
                        tar.addfile(info)
                    else:
                        with open(path, "rb") as f:
                            tar.addfile(info, f)
            if gz is not None:
                gz.close()
        os.replace(tmp, out)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def package(
    savedmodels: list[str | os.PathLike],
    out: str | os.PathLike,
    code_dir: str | os.PathLike | None = None,
    names: list[str] | None = None,
    versions: list[int] | None = None,
) -> Path:
    """Write a SageMaker-style model archive to ``out`` and return its path.

    Each entry of ``savedmodels`` is a SavedModel folder (placed as ``<version>/``, version
    from ``versions`` or 1) or a folder of numeric version dirs (all kept, or only the one
    given in ``versions``). One model without ``names`` goes at the archive root (served
    as ``model``); otherwise each goes under ``<name>/``. ``code_dir`` becomes ``code/``.
    ``out`` ending in ``.tar`` is left uncompressed; an existing directory gets ``model.tar.gz``.
    """
    sources = [Path(p) for p in savedmodels]
    if not sources:
        raise InvalidInput("package needs at least one SavedModel folder")
    if names is not None and len(names) != len(sources):
        raise InvalidInput(f"got {len(names)} names for {len(sources)} models; give one name per model")
    if versions is not None and len(versions) != len(sources):
        raise InvalidInput(f"got {len(versions)} versions for {len(sources)} models; give one version per model")

    per_model = [_model_sources(src, None if versions is None else versions[i]) for i, src in enumerate(sources)]
    if names is None and len(sources) == 1:
        prefixes = [""]
    else:
        model_names = list(names) if names is not None else _default_names(sources)
        for n in model_names:
            _check_name(n)
        if len(set(model_names)) != len(model_names):
            raise InvalidInput(f"model names must be unique, got {model_names}")
        prefixes = [f"{n}/" for n in model_names]

    entries: dict[str, Path] = {}
    for src, prefix, model in zip(sources, prefixes, per_model):
        if prefix:
            entries[prefix.rstrip("/")] = src
        for vname, folder in model:
            arc = f"{prefix}{vname}"
            if arc in entries:
                raise InvalidInput(f"two inputs both give '{arc}' in the archive")
            _walk(folder, arc, entries)
    if code_dir is not None:
        code = Path(code_dir)
        if not code.is_dir():
            raise ArtifactError(
                f"code folder '{code}' is not a directory; expected a folder with inference.py "
                "and optionally requirements.txt and lib/"
            )
        _walk(code, "code", entries)

    out_path = Path(out)
    if out_path.is_dir():
        out_path = out_path / "model.tar.gz"
    if not out_path.parent.is_dir():
        raise ArtifactError(f"cannot write '{out_path}': folder '{out_path.parent}' does not exist")
    _write(out_path, entries)
    return out_path
