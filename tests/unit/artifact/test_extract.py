"""safe_extract refuses hostile archives before writing anything, and extracts honest ones."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

import pytest

from tfbatch.artifact import safe_extract
from tfbatch.errors import ArtifactError, UnsafeArchive

FILE = {"type": tarfile.REGTYPE, "mode": 0o644}
DIR = {"type": tarfile.DIRTYPE, "mode": 0o755}


def sym(name: str, target: str) -> tuple[dict, None]:
    return {"name": name, "type": tarfile.SYMTYPE, "linkname": target}, None


def hard(name: str, target: str) -> tuple[dict, None]:
    return {"name": name, "type": tarfile.LNKTYPE, "linkname": target}, None


def file(name: str, data: bytes = b"data") -> tuple[dict, bytes]:
    return {"name": name, **FILE}, data


def directory(name: str) -> tuple[dict, None]:
    return {"name": name, **DIR}, None


@pytest.fixture
def layout(tmp_path):
    """(sandbox, target): target lives inside sandbox so escapes land where we can see them."""
    sandbox = tmp_path / "sandbox"
    target = sandbox / "target"
    sandbox.mkdir()
    (sandbox / "outside").mkdir()
    (sandbox / "outside" / "secret.txt").write_text("secret")
    return sandbox, target


def snapshot(sandbox: Path) -> set[str]:
    return {str(p.relative_to(sandbox)) for p in sandbox.rglob("*")}


def assert_refused(archive: Path, sandbox: Path, target: Path, member: str, reason: str) -> UnsafeArchive:
    before = snapshot(sandbox)
    with pytest.raises(UnsafeArchive) as info:
        safe_extract(archive, target)
    msg = str(info.value)
    assert str(archive) in msg and member in msg and reason in msg, msg
    # Nothing written anywhere: not outside, and not even the target folder itself.
    assert snapshot(sandbox) == before
    assert (sandbox / "outside" / "secret.txt").read_text() == "secret"
    return info.value


def test_dotdot_escape_refused(tmp_path, layout, tar_builder):
    sandbox, target = layout
    arc = tar_builder(tmp_path / "a.tar.gz", [file("1/saved_model.pb"), file("../escaped.txt")])
    assert_refused(arc, sandbox, target, "../escaped.txt", "outside")
    assert not (sandbox / "escaped.txt").exists()


def test_dotdot_inside_tree_is_fine(tmp_path, layout, tar_builder):
    _, target = layout
    arc = tar_builder(tmp_path / "a.tar.gz", [directory("a"), file("a/../b.txt")])
    safe_extract(arc, target)
    assert (target / "b.txt").read_bytes() == b"data"


def test_absolute_path_refused(tmp_path, layout, tar_builder):
    sandbox, target = layout
    victim = sandbox / "outside" / "abs.txt"
    arc = tar_builder(tmp_path / "a.tar.gz", [file(str(victim))])
    assert_refused(arc, sandbox, target, str(victim), "absolute path")
    assert not victim.exists()


def test_symlink_out_refused(tmp_path, layout, tar_builder):
    sandbox, target = layout
    arc = tar_builder(tmp_path / "a.tar.gz", [sym("link", "../outside"), file("link/pwned.txt")])
    assert_refused(arc, sandbox, target, "link", "outside the extraction folder")
    assert not (sandbox / "outside" / "pwned.txt").exists()


def test_symlink_to_absolute_refused(tmp_path, layout, tar_builder):
    sandbox, target = layout
    arc = tar_builder(tmp_path / "a.tar.gz", [sym("passwd", "/etc/passwd")])
    assert_refused(arc, sandbox, target, "passwd", "absolute path")


def test_symlink_chain_that_only_escapes_after_resolution(tmp_path, layout, tar_builder):
    # Lexically "sub/c/../.." is ".", but sub/c -> ../sub2 makes the OS land above the target.
    sandbox, target = layout
    assert os.path.normpath("sub/c/../..") == "."
    arc = tar_builder(
        tmp_path / "a.tar.gz",
        [directory("sub"), directory("sub2"), sym("sub/c", "../sub2"), sym("a", "sub/c/../.."), file("a/outside/x")],
    )
    assert_refused(arc, sandbox, target, "'a'", "outside the extraction folder")


def test_file_written_through_symlink_chain_refused(tmp_path, layout, tar_builder):
    sandbox, target = layout
    arc = tar_builder(
        tmp_path / "a.tar.gz",
        [directory("sub"), directory("sub2"), sym("sub/c", "../sub2"), file("sub/c/../../escaped.txt")],
    )
    assert_refused(arc, sandbox, target, "sub/c/../../escaped.txt", "outside")
    assert not (sandbox / "escaped.txt").exists()


def test_hardlink_out_refused(tmp_path, layout, tar_builder):
    sandbox, target = layout
    arc = tar_builder(tmp_path / "a.tar.gz", [hard("h", "../outside/secret.txt")])
    assert_refused(arc, sandbox, target, "'h'", "hard link target resolves outside")


def test_hardlink_absolute_refused(tmp_path, layout, tar_builder):
    sandbox, target = layout
    arc = tar_builder(tmp_path / "a.tar.gz", [hard("h", str(sandbox / "outside" / "secret.txt"))])
    assert_refused(arc, sandbox, target, "'h'", "absolute path")


def test_hardlink_inside_accepted(tmp_path, layout, tar_builder):
    _, target = layout
    arc = tar_builder(tmp_path / "a.tar.gz", [file("a.txt", b"same"), hard("b.txt", "a.txt")])
    safe_extract(arc, target)
    assert (target / "b.txt").read_bytes() == b"same"


@pytest.mark.parametrize(
    "fields, reason",
    [
        ({"type": tarfile.CHRTYPE, "devmajor": 1, "devminor": 3}, "character device"),
        ({"type": tarfile.BLKTYPE, "devmajor": 8, "devminor": 0}, "block device"),
        ({"type": tarfile.FIFOTYPE}, "FIFO"),
    ],
)
def test_devices_and_fifos_refused(tmp_path, layout, tar_builder, fields, reason):
    sandbox, target = layout
    arc = tar_builder(tmp_path / "a.tar.gz", [file("ok.txt"), ({"name": "dev", **fields}, None)])
    assert_refused(arc, sandbox, target, "'dev'", reason)


def test_safe_symlink_inside_tree_accepted(tmp_path, layout, tar_builder):
    sandbox, target = layout
    arc = tar_builder(
        tmp_path / "a.tar.gz",
        [file("1/saved_model.pb", b"pb"), sym("latest", "1"), sym("1/alias.pb", "saved_model.pb")],
    )
    out = safe_extract(arc, target)
    assert out == target.resolve()
    assert os.readlink(target / "latest") == "1"
    assert (target / "latest" / "saved_model.pb").read_bytes() == b"pb"
    assert (target / "1" / "alias.pb").read_bytes() == b"pb"
    assert snapshot(sandbox) - {"outside", "outside/secret.txt"} == {
        "target", "target/1", "target/1/saved_model.pb", "target/1/alias.pb", "target/latest"
    }


def test_symlink_inside_another_symlink_refused(tmp_path, layout, tar_builder):
    sandbox, target = layout
    arc = tar_builder(tmp_path / "a.tar.gz", [directory("d"), sym("l", "d"), sym("l/x", "..")])
    assert_refused(arc, sandbox, target, "l/x", "inside another symlink")


def test_existing_symlink_in_target_is_not_followed_out(tmp_path, layout, tar_builder):
    # The archive alone is innocent; the reused target folder is not.
    sandbox, target = layout
    target.mkdir()
    (target / "pre").symlink_to(sandbox / "outside")
    arc = tar_builder(tmp_path / "a.tar.gz", [file("pre/x.txt")])
    with pytest.raises(UnsafeArchive, match="outside"):
        safe_extract(arc, target)
    assert not (sandbox / "outside" / "x.txt").exists()


@pytest.mark.parametrize("suffix, mode", [(".tar.gz", "w:gz"), (".tgz", "w:gz"), (".tar", "w"), (".bin", "w")])
def test_formats_and_dot_prefixed_names(tmp_path, tar_builder, suffix, mode):
    # `tar -C dir -czf model.tar.gz .` writes "." and "./1/..." members.
    arc = tar_builder(
        tmp_path / f"m{suffix}",
        [directory("."), directory("./1"), file("./1/saved_model.pb", b"pb"), directory("./1/variables")],
        mode=mode,
    )
    out = safe_extract(arc, tmp_path / "out")
    assert (out / "1" / "saved_model.pb").read_bytes() == b"pb"
    assert (out / "1" / "variables").is_dir()


def test_not_a_tar(tmp_path):
    bogus = tmp_path / "model.tar.gz"
    bogus.write_bytes(b"this is not an archive at all" * 20)
    with pytest.raises(ArtifactError, match="not a readable tar archive") as info:
        safe_extract(bogus, tmp_path / "out")
    assert not isinstance(info.value, UnsafeArchive)
    assert str(bogus) in str(info.value)


def test_missing_archive(tmp_path):
    with pytest.raises(ArtifactError, match="does not exist"):
        safe_extract(tmp_path / "nope.tar.gz", tmp_path / "out")
