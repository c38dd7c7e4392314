"""Archives refused before extraction: hard links to non-files, absurd member counts and sizes."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from tfbatch.artifact import safe_extract
from tfbatch.artifact.extract import ArchiveLimits
from tfbatch.errors import ArtifactError, ConfigError, UnsafeArchive


def _tar(path: Path, build) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        build(tar)
    return path


def _add(tar, name, kind=tarfile.REGTYPE, linkname="", data=b""):
    import io

    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, linkname
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)


def _refused(archive: Path, target: Path, *needles: str, limits=None) -> str:
    with pytest.raises(UnsafeArchive) as info:
        safe_extract(archive, target, limits)
    msg = str(info.value)
    assert str(archive) in msg
    for needle in needles:
        assert needle in msg
    assert not target.exists()  # refused before the target folder was even made
    return msg


@pytest.mark.parametrize(
    "members, needle",
    [
        ([("real.txt", tarfile.REGTYPE, ""), ("s", tarfile.SYMTYPE, "real.txt"), ("h", tarfile.LNKTYPE, "s")],
         "hard link to 's', which is a symlink"),
        ([("d", tarfile.DIRTYPE, ""), ("h", tarfile.LNKTYPE, "d")], "hard link to 'd', which is a directory"),
        ([("h", tarfile.LNKTYPE, "later.txt"), ("later.txt", tarfile.REGTYPE, "")],
         "hard link to 'later.txt', which is not a member before it"),
    ],
)
def test_hard_link_to_anything_but_an_earlier_file_is_refused(tmp_path, members, needle):
    def build(tar):
        for name, kind, link in members:
            _add(tar, name, kind, link, b"x" if kind == tarfile.REGTYPE else b"")

    arc = _tar(tmp_path / "m.tar.gz", build)
    _refused(arc, tmp_path / "out", "refusing member 'h'", needle)


def test_hard_link_to_a_hard_link_of_a_file_is_fine(tmp_path):
    def build(tar):
        _add(tar, "a", data=b"same")
        _add(tar, "b", tarfile.LNKTYPE, "a")
        _add(tar, "c", tarfile.LNKTYPE, "b")

    root = safe_extract(_tar(tmp_path / "m.tar.gz", build), tmp_path / "out")
    assert (root / "c").read_bytes() == b"same"


def test_too_many_members(tmp_path, monkeypatch):
    def build(tar):
        for i in range(301):
            _add(tar, f"f{i}")

    arc = _tar(tmp_path / "many.tar.gz", build)
    _refused(arc, tmp_path / "out", "more than 300 members", limits=ArchiveLimits(max_members=300))
    monkeypatch.setenv("TFBATCH_ARCHIVE_MAX_MEMBERS", "300")
    _refused(arc, tmp_path / "out", "TFBATCH_ARCHIVE_MAX_MEMBERS")
    monkeypatch.setenv("TFBATCH_ARCHIVE_MAX_MEMBERS", "301")
    assert len(list(safe_extract(arc, tmp_path / "out").iterdir())) == 301


def test_member_declaring_a_terabyte_is_refused_by_the_default_cap(tmp_path):
    # Only the header is written: the archive is a few hundred bytes and claims 1 TiB.
    with tarfile.open(tmp_path / "huge.tar.gz", "w:gz") as tar:
        info = tarfile.TarInfo("variables/variables.data-00000-of-00001")
        info.size = 1 << 40
        tar.fileobj.write(info.tobuf(tar.format, tar.encoding, tar.errors))
    msg = _refused(tmp_path / "huge.tar.gz", tmp_path / "out", "holds more than 68719476736 bytes",
                   "1099511627776 bytes", "TFBATCH_ARCHIVE_MAX_BYTES")
    assert "variables/variables.data" in msg


def test_total_over_the_cap_across_members(tmp_path):
    def build(tar):
        for i in range(4):
            _add(tar, f"f{i}", data=b"x" * 100)

    arc = _tar(tmp_path / "m.tar.gz", build)
    _refused(arc, tmp_path / "out", "more than 350 bytes", "at member 'f3'", limits=ArchiveLimits(max_total_bytes=350))


def test_bad_limit_in_the_environment_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("TFBATCH_ARCHIVE_MAX_BYTES", "lots")
    with pytest.raises(ConfigError, match="TFBATCH_ARCHIVE_MAX_BYTES=.lots.: expected an integer"):
        safe_extract(tmp_path / "any.tar.gz", tmp_path / "out")
