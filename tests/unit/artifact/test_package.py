"""package() builds the archive layout SageMaker expects, reproducibly, and it round-trips."""

from __future__ import annotations

import hashlib
import os
import tarfile
import time

import pytest

from tfbatch.artifact import open_artifact, package
from tfbatch.errors import ArtifactError, InvalidInput


@pytest.fixture
def code_dir(tmp_path):
    code = tmp_path / "code"
    (code / "lib" / "helper").mkdir(parents=True)
    (code / "inference.py").write_text("def handler(data, context):\n    return data.read(), 'application/json'\n")
    (code / "requirements.txt").write_text("pillow\n")
    (code / "lib" / "helper" / "__init__.py").write_text("X = 1\n")
    (code / "__pycache__").mkdir()
    (code / "__pycache__" / "inference.cpython-311.pyc").write_bytes(b"junk")
    return code


def names_in(archive) -> list[str]:
    with tarfile.open(archive) as tar:
        return tar.getnames()


def test_single_bare_savedmodel_goes_to_root(tmp_path, fake_savedmodel, code_dir):
    sm = fake_savedmodel(tmp_path / "export")
    out = package([sm], tmp_path / "model.tar.gz", code_dir=code_dir)
    names = names_in(out)
    assert names == sorted(names)
    assert "1/saved_model.pb" in names and "1/variables/variables.index" in names
    assert "code/inference.py" in names and "code/lib/helper/__init__.py" in names
    assert not any("__pycache__" in n for n in names)
    art = open_artifact(out, workdir=tmp_path / "w")
    assert list(art.models) == ["model"] and list(art.model().versions) == [1]
    assert art.inference_script and art.requirements and art.lib_dir


def test_version_given_for_bare_savedmodel(tmp_path, fake_savedmodel):
    sm = fake_savedmodel(tmp_path / "export")
    out = package([sm], tmp_path / "m.tar.gz", versions=[1538687370])
    assert open_artifact(out, workdir=tmp_path / "w").model().latest == 1538687370


def test_versioned_dir_kept_whole(tmp_path, fake_savedmodel):
    fake_savedmodel(tmp_path / "resnet" / "1")
    fake_savedmodel(tmp_path / "resnet" / "0002")
    out = package([tmp_path / "resnet"], tmp_path / "m.tar.gz")
    assert {n.split("/")[0] for n in names_in(out)} == {"1", "0002"}
    entry = open_artifact(out, workdir=tmp_path / "w").model()
    assert list(entry.versions) == [1, 2]


def test_several_models_round_trip(tmp_path, fake_savedmodel, code_dir):
    fake_savedmodel(tmp_path / "in" / "resnet" / "1")
    fake_savedmodel(tmp_path / "in" / "resnet" / "2")
    mnist = fake_savedmodel(tmp_path / "in" / "mnist_export")
    out = package(
        [tmp_path / "in" / "resnet", mnist], tmp_path / "model.tar.gz", code_dir=code_dir, names=["resnet", "mnist"],
        versions=[2, 5],
    )
    art = open_artifact(out, workdir=tmp_path / "w")
    assert list(art.models) == ["mnist", "resnet"]
    assert list(art.models["resnet"].versions) == [2]  # only the version asked for
    assert list(art.models["mnist"].versions) == [5]
    assert art.default_model_name == "mnist"
    assert art.inference_script.read_text() == (code_dir / "inference.py").read_text()


def test_several_models_named_after_folders(tmp_path, fake_savedmodel):
    a = fake_savedmodel(tmp_path / "alpha")
    fake_savedmodel(tmp_path / "beta" / "3")
    out = package([a, tmp_path / "beta"], tmp_path / "m.tar.gz")
    art = open_artifact(out, workdir=tmp_path / "w")
    assert {n: list(m.versions) for n, m in art.models.items()} == {"alpha": [1], "beta": [3]}


def test_one_model_with_name_gets_a_folder(tmp_path, fake_savedmodel):
    sm = fake_savedmodel(tmp_path / "x")
    out = package([sm], tmp_path / "m.tar.gz", names=["classifier"])
    assert names_in(out)[0] == "classifier"
    assert list(open_artifact(out, workdir=tmp_path / "w").models) == ["classifier"]


def test_deterministic_bytes(tmp_path, fake_savedmodel, code_dir):
    sm = fake_savedmodel(tmp_path / "sm")
    first = package([sm], tmp_path / "a.tar.gz", code_dir=code_dir)
    # Touch everything: new mtimes and modes must not change the archive.
    later = time.time() + 1000
    for p in [*sm.rglob("*"), *code_dir.rglob("*")]:
        os.utime(p, (later, later))
    os.chmod(code_dir / "inference.py", 0o600)
    second = package([sm], tmp_path / "b.tar.gz", code_dir=code_dir)
    assert hashlib.sha256(first.read_bytes()).digest() == hashlib.sha256(second.read_bytes()).digest()
    with tarfile.open(first) as tar:
        for m in tar.getmembers():
            assert (m.uid, m.gid, m.uname, m.gname, m.mtime) == (0, 0, "", "", 315532800)
            assert m.mode in (0o644, 0o755)


def test_content_change_changes_bytes(tmp_path, fake_savedmodel):
    sm = fake_savedmodel(tmp_path / "sm")
    first = package([sm], tmp_path / "a.tar.gz").read_bytes()
    (sm / "saved_model.pb").write_bytes(b"different")
    assert package([sm], tmp_path / "b.tar.gz").read_bytes() != first


def test_plain_tar_and_directory_output(tmp_path, fake_savedmodel):
    sm = fake_savedmodel(tmp_path / "sm")
    plain = package([sm], tmp_path / "model.tar")
    assert plain.read_bytes()[:2] != b"\x1f\x8b"
    (tmp_path / "outdir").mkdir()
    assert package([sm], tmp_path / "outdir") == tmp_path / "outdir" / "model.tar.gz"


def test_missing_savedmodel_names_the_path(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ArtifactError) as info:
        package([tmp_path / "empty"], tmp_path / "m.tar.gz")
    assert str(tmp_path / "empty") in str(info.value) and "saved_model.pb" in str(info.value)
    assert not (tmp_path / "m.tar.gz").exists()


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"names": ["a", "b"]}, "2 names for 1 models"),
        ({"versions": [1, 2]}, "2 versions for 1 models"),
        ({"names": ["12"]}, "all digits"),
        ({"names": ["code"]}, "not usable"),
        ({"names": ["a/b"]}, "not usable"),
    ],
)
def test_bad_arguments(tmp_path, fake_savedmodel, kwargs, match):
    sm = fake_savedmodel(tmp_path / "sm")
    with pytest.raises(InvalidInput, match=match):
        package([sm], tmp_path / "m.tar.gz", **kwargs)


def test_missing_version_and_code_dir(tmp_path, fake_savedmodel):
    fake_savedmodel(tmp_path / "m" / "1")
    with pytest.raises(ArtifactError, match="no version 4; it holds versions 1"):
        package([tmp_path / "m"], tmp_path / "x.tar.gz", versions=[4])
    with pytest.raises(ArtifactError, match="code folder"):
        package([tmp_path / "m"], tmp_path / "x.tar.gz", code_dir=tmp_path / "nocode")


def test_duplicate_folder_names_need_names(tmp_path, fake_savedmodel):
    a = fake_savedmodel(tmp_path / "a" / "model")
    b = fake_savedmodel(tmp_path / "b" / "model")
    with pytest.raises(InvalidInput, match="pass names="):
        package([a, b], tmp_path / "m.tar.gz")
    out = package([a, b], tmp_path / "m.tar.gz", names=["one", "two"])
    assert list(open_artifact(out, workdir=tmp_path / "w").models) == ["one", "two"]
