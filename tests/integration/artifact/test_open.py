"""open_artifact on local archives and fsspec URIs (the in-memory filesystem stands in for S3)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tarfile
import tempfile
import uuid
from pathlib import Path

import fsspec
import pytest

from tfbatch.artifact import open_artifact
from tfbatch.artifact.discover import _host
from tfbatch.errors import ArtifactError, UnsafeArchive


@pytest.fixture
def model_dir(tmp_path, fake_savedmodel):
    src = tmp_path / "src"
    fake_savedmodel(src / "resnet" / "1")
    fake_savedmodel(src / "resnet" / "2")
    fake_savedmodel(src / "mnist" / "0007")
    (src / "code").mkdir()
    (src / "code" / "inference.py").write_text("def handler(data, context):\n    return b'', 'x'\n")
    return src


def make_tar(src, dest, mode="w:gz"):
    with tarfile.open(dest, mode) as tar:
        for p in sorted(src.rglob("*")):
            tar.add(p, arcname=str(p.relative_to(src)), recursive=False)
    return dest


@pytest.fixture
def memfs():
    fs = fsspec.filesystem("memory")
    root = f"/t-{uuid.uuid4().hex}"
    yield fs, root
    if fs.exists(root):
        fs.rm(root, recursive=True)


def check(art, workdir=None):
    assert list(art.models) == ["mnist", "resnet"]
    assert list(art.models["resnet"].versions) == [1, 2]
    assert art.models["mnist"].latest == 7
    assert art.inference_script is not None and art.inference_script.read_text().startswith("def handler")
    if workdir is not None:
        assert art.root == workdir
        assert art.models["resnet"].path().is_relative_to(workdir)


@pytest.mark.parametrize("name, mode", [("model.tar.gz", "w:gz"), ("model.tgz", "w:gz"), ("model.tar", "w")])
def test_local_archive_into_workdir(tmp_path, model_dir, name, mode):
    arc = make_tar(model_dir, tmp_path / name, mode)
    work = tmp_path / "work"
    art = open_artifact(arc, workdir=work)
    check(art, work)
    assert not art.temporary
    art.cleanup()  # not ours to delete
    assert work.is_dir()


KILLED_AFTER_OPENING = """
import os, signal, sys
from tfbatch.artifact import open_artifact
print(open_artifact(sys.argv[1]).root, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_killed_jobs_extracted_model_is_deleted_by_the_next_one(tmp_path, model_dir):
    arc = make_tar(model_dir, tmp_path / "model.tar.gz")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch)}
    killed = subprocess.run([sys.executable, "-c", KILLED_AFTER_OPENING, str(arc)], env=env,
                            capture_output=True, text=True, timeout=120)
    assert killed.returncode == -signal.SIGKILL
    left = Path(killed.stdout.strip())
    assert left.parent == scratch and (left / "code" / "inference.py").is_file()
    # Another machine's folder (a shared /tmp) and a live process's stay whatever their age.
    other = scratch / "tfbatch-model-another_host-1-x"
    live = scratch / f"tfbatch-model-{_host()}-{os.getpid()}-x"
    other.mkdir()
    live.mkdir()
    nxt = subprocess.run([sys.executable, "-c", "import sys; from tfbatch.artifact import open_artifact; "
                          "open_artifact(sys.argv[1]).cleanup()", str(arc)], env=env,
                         capture_output=True, text=True, timeout=120)
    assert nxt.returncode == 0, nxt.stderr
    assert sorted(p.name for p in scratch.iterdir()) == sorted([other.name, live.name])


def test_local_archive_default_workdir_is_fresh_tempdir(tmp_path, model_dir):
    arc = make_tar(model_dir, tmp_path / "model.tar.gz")
    a, b = open_artifact(str(arc)), open_artifact(str(arc))
    try:
        check(a)
        assert a.temporary and a.root != b.root and a.root.name.startswith("tfbatch-model-")
    finally:
        a.cleanup()
        b.cleanup()
    assert not a.root.exists() and not b.root.exists()


def test_local_file_that_is_not_an_archive(tmp_path):
    f = tmp_path / "saved_model.pb"
    f.write_bytes(b"\x08\x01" * 50)
    with pytest.raises(ArtifactError, match="not a readable tar archive"):
        open_artifact(f, workdir=tmp_path / "w")


def test_archive_without_models_leaves_no_tempdir(tmp_path, monkeypatch):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "readme").write_text("x")
    arc = make_tar(tmp_path / "empty", tmp_path / "model.tar.gz")
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    with pytest.raises(ArtifactError, match="no model found"):
        open_artifact(arc)
    assert list((tmp_path / "tmp").iterdir()) == []


def test_memory_archive(tmp_path, model_dir, memfs):
    fs, root = memfs
    arc = make_tar(model_dir, tmp_path / "model.tar.gz")
    fs.pipe(f"{root}/job/output/model.tar.gz", arc.read_bytes())
    work = tmp_path / "work"
    check(open_artifact(f"memory://{root}/job/output/model.tar.gz", workdir=work), work)


def test_memory_unsafe_archive_refused(tmp_path, memfs, tar_builder):
    fs, root = memfs
    info = {"name": "../../escape.txt", "type": tarfile.REGTYPE, "mode": 0o644}
    arc = tar_builder(tmp_path / "bad.tar.gz", [(info, b"x")])
    fs.pipe(f"{root}/bad.tar.gz", arc.read_bytes())
    with pytest.raises(UnsafeArchive, match=r"\.\./\.\./escape\.txt"):
        open_artifact(f"memory://{root}/bad.tar.gz", workdir=tmp_path / "a" / "b")
    assert not (tmp_path / "escape.txt").exists()


def test_memory_directory_prefix(tmp_path, model_dir, memfs):
    fs, root = memfs
    for p in model_dir.rglob("*"):
        if p.is_file():
            fs.pipe(f"{root}/models/{p.relative_to(model_dir).as_posix()}", p.read_bytes())
    work = tmp_path / "work"
    check(open_artifact(f"memory://{root}/models/", workdir=work), work)
    assert (work / "resnet" / "1" / "variables" / "variables.index").read_bytes() == b"idx"


def test_memory_prefix_key_escaping_refused(tmp_path, memfs):
    fs, root = memfs
    fs.pipe(f"{root}/m/1/saved_model.pb", b"x")
    fs.pipe(f"{root}/m/a/../../../escape", b"x")
    with pytest.raises(UnsafeArchive, match="escape"):
        open_artifact(f"memory://{root}/m", workdir=tmp_path / "w")
    assert not (tmp_path / "escape").exists()


def test_memory_missing(tmp_path, memfs):
    _, root = memfs
    with pytest.raises(ArtifactError, match="does not exist"):
        open_artifact(f"memory://{root}/nothing/model.tar.gz", workdir=tmp_path / "w")
