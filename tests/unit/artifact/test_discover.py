"""Layout rules: which folders are models, which are versions, where the user code is."""

from __future__ import annotations

import pytest

from tfbatch.artifact import Artifact, ModelEntry, open_artifact
from tfbatch.artifact.discover import discover
from tfbatch.errors import ArtifactError, NotFound


def test_single_model_at_root(tmp_path, fake_savedmodel):
    fake_savedmodel(tmp_path / "1538687370")
    fake_savedmodel(tmp_path / "2")
    (tmp_path / "3").mkdir()  # numeric but empty: not a version
    (tmp_path / "notes").mkdir()
    art = discover(tmp_path)
    assert list(art.models) == ["model"]
    entry = art.model()
    assert list(entry.versions) == [2, 1538687370]
    assert entry.latest == 1538687370
    assert entry.path() == tmp_path / "1538687370"
    assert entry.path(2) == tmp_path / "2"
    assert art.default_model_name == "model"
    assert art.code_dir is None and art.inference_script is None


def test_leading_zeros_and_pbtxt(tmp_path, fake_savedmodel):
    fake_savedmodel(tmp_path / "0001")
    fake_savedmodel(tmp_path / "010", pbtxt=True)
    entry = discover(tmp_path).model()
    assert entry.versions == {1: tmp_path / "0001", 10: tmp_path / "010"}
    assert entry.latest == 10


def test_duplicate_version_spellings_refused(tmp_path, fake_savedmodel):
    fake_savedmodel(tmp_path / "1")
    fake_savedmodel(tmp_path / "01")
    with pytest.raises(ArtifactError, match="two directories for version 1"):
        discover(tmp_path)


def test_unknown_version_names_the_available_ones(tmp_path, fake_savedmodel):
    fake_savedmodel(tmp_path / "1")
    fake_savedmodel(tmp_path / "5")
    with pytest.raises(NotFound) as info:
        discover(tmp_path).model().path(3)
    assert "model 'model'" in str(info.value) and "1, 5" in str(info.value)


def test_multi_model_sorted_with_code(tmp_path, fake_savedmodel):
    fake_savedmodel(tmp_path / "zeta" / "1")
    fake_savedmodel(tmp_path / "alpha" / "3")
    fake_savedmodel(tmp_path / "alpha" / "7")
    code = tmp_path / "code"
    (code / "lib").mkdir(parents=True)
    (code / "inference.py").write_text("def handler(d, c): pass\n")
    (code / "requirements.txt").write_text("pillow\n")
    fake_savedmodel(code / "1")  # code/ is never a model, whatever it holds
    art = discover(tmp_path)
    assert list(art.models) == ["alpha", "zeta"]
    assert art.models["alpha"] == ModelEntry("alpha", {3: tmp_path / "alpha" / "3", 7: tmp_path / "alpha" / "7"})
    assert art.default_model_name == "alpha"
    assert art.code_dir == code
    assert art.inference_script == code / "inference.py"
    assert art.requirements == code / "requirements.txt"
    assert art.lib_dir == code / "lib"
    assert art.model("zeta").latest == 1
    with pytest.raises(NotFound, match="available models: alpha, zeta"):
        art.model("beta")


def test_code_without_optional_parts(tmp_path, fake_savedmodel):
    fake_savedmodel(tmp_path / "1")
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "inference.py").write_text("")
    art = discover(tmp_path)
    assert art.inference_script is not None
    assert art.requirements is None and art.lib_dir is None


def test_default_model_env(tmp_path, fake_savedmodel, monkeypatch):
    fake_savedmodel(tmp_path / "a" / "1")
    fake_savedmodel(tmp_path / "b" / "1")
    art = discover(tmp_path)
    monkeypatch.setenv("SAGEMAKER_TFS_DEFAULT_MODEL_NAME", "b")
    assert art.default_model_name == "b"
    assert art.model().name == "b"
    monkeypatch.setenv("SAGEMAKER_TFS_DEFAULT_MODEL_NAME", "c")
    with pytest.raises(ArtifactError, match=r"SAGEMAKER_TFS_DEFAULT_MODEL_NAME='c'.*available models: a, b"):
        art.default_model_name


def test_nested_estimator_export(tmp_path, fake_savedmodel):
    fake_savedmodel(tmp_path / "export" / "Servo" / "1538687370")
    fake_savedmodel(tmp_path / "export" / "Servo" / "1538687999")
    art = discover(tmp_path)
    assert list(art.models) == ["Servo"]
    assert art.model().latest == 1538687999


def test_nested_search_is_sorted_and_stops_at_models(tmp_path, fake_savedmodel):
    fake_savedmodel(tmp_path / "b" / "deep" / "m2" / "1")
    fake_savedmodel(tmp_path / "a" / "m1" / "4")
    fake_savedmodel(tmp_path / "a" / "m1" / "sub" / "inner" / "1")  # inside a model: not searched
    fake_savedmodel(tmp_path / ".hidden" / "m3" / "1")
    art = discover(tmp_path)
    assert list(art.models) == ["m1", "m2"]
    assert art.model().name == "m1"


def test_same_model_name_twice_refused(tmp_path, fake_savedmodel):
    fake_savedmodel(tmp_path / "a" / "Servo" / "1")
    fake_savedmodel(tmp_path / "b" / "Servo" / "1")
    with pytest.raises(ArtifactError, match="two models named 'Servo'"):
        discover(tmp_path)


def test_bare_savedmodel(tmp_path, fake_savedmodel):
    fake_savedmodel(tmp_path)
    art = discover(tmp_path)
    assert art.models == {"model": ModelEntry("model", {1: tmp_path})}


def test_no_model_says_what_was_expected(tmp_path, fake_savedmodel):
    (tmp_path / "stuff").mkdir()
    (tmp_path / "readme.txt").write_text("hi")
    with pytest.raises(ArtifactError) as info:
        discover(tmp_path)
    msg = str(info.value)
    assert "no model found" in msg and "<version>/saved_model.pb" in msg


def test_no_model_hints_at_unversioned_savedmodel(tmp_path, fake_savedmodel):
    fake_savedmodel(tmp_path / "my_model")
    with pytest.raises(ArtifactError, match="'my_model' not inside a numeric version directory"):
        discover(tmp_path)


def test_symlink_loop_does_not_hang(tmp_path, fake_savedmodel):
    fake_savedmodel(tmp_path / "m" / "1")
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "loop").symlink_to(tmp_path / "x")
    assert list(discover(tmp_path).models) == ["m"]


def test_open_artifact_local_dir_used_in_place(tmp_path, fake_savedmodel):
    fake_savedmodel(tmp_path / "1")
    art = open_artifact(tmp_path)
    assert isinstance(art, Artifact) and art.root == tmp_path and not art.temporary
    assert open_artifact(str(tmp_path)).root == tmp_path
    assert open_artifact(f"file://{tmp_path}").root == tmp_path


def test_open_artifact_missing(tmp_path):
    with pytest.raises(ArtifactError, match="does not exist"):
        open_artifact(tmp_path / "missing.tar.gz")


SCRIPT = b"def handler(data, context):\n    return data.read(), 'x'\n"


def test_the_script_is_read_from_a_folder_or_an_archive_without_extracting_it(tmp_path, fake_savedmodel, tar_builder):
    import tarfile

    from tfbatch.artifact.discover import read_inference_script

    fake_savedmodel(tmp_path / "folder" / "1")
    assert read_inference_script(tmp_path / "folder") is None  # no code/
    (tmp_path / "folder" / "code").mkdir()
    (tmp_path / "folder" / "code" / "inference.py").write_bytes(SCRIPT)
    assert read_inference_script(str(tmp_path / "folder")) == SCRIPT
    # An archive: the script may come after the model, under "./", in any compression.
    def members():  # the builder takes the names out of the dicts
        return [({"name": "1/saved_model.pb"}, b"x" * 1000), ({"name": "./code/inference.py"}, SCRIPT)]

    assert read_inference_script(tar_builder(tmp_path / "m.tar.gz", members())) == SCRIPT
    assert read_inference_script(tar_builder(tmp_path / "m.tar", members(), mode="w")) == SCRIPT
    assert read_inference_script(f"file://{tmp_path / 'm.tar.gz'}") == SCRIPT
    # No script, a link or a folder in its place, a remote or missing artifact, a broken archive: None.
    assert read_inference_script(tar_builder(tmp_path / "none.tar.gz", members()[:1])) is None
    link = [({"name": "code/inference.py", "type": tarfile.SYMTYPE, "linkname": "/etc/passwd"}, None)]
    assert read_inference_script(tar_builder(tmp_path / "link.tar.gz", link)) is None
    assert read_inference_script("s3://bucket/model.tar.gz") is None
    assert read_inference_script(tmp_path / "missing.tar.gz") is None
    (tmp_path / "broken.tar.gz").write_bytes(b"\x1f\x8b not gzip")
    assert read_inference_script(tmp_path / "broken.tar.gz") is None


def test_the_script_is_not_looked_for_in_large_archives_or_read_past_its_limit(tmp_path, tar_builder, monkeypatch):
    import importlib

    module = importlib.import_module("tfbatch.artifact.discover")  # the package exports a function of that name

    archive = tar_builder(tmp_path / "m.tar", [({"name": "code/inference.py"}, SCRIPT)], mode="w")
    monkeypatch.setattr(module, "SCRIPT_ARCHIVE_MAX_BYTES", archive.stat().st_size - 1)
    assert module.read_inference_script(archive) is None  # would take longer than it saves
    monkeypatch.setattr(module, "SCRIPT_ARCHIVE_MAX_BYTES", 1 << 20)
    assert module.read_inference_script(archive) == SCRIPT
    monkeypatch.setattr(module, "SCRIPT_MAX_BYTES", len(SCRIPT) - 1)
    assert module.read_inference_script(archive) is None  # not a script anyone writes
    monkeypatch.setattr(module, "SCRIPT_MAX_BYTES", 1 << 20)
    # A bomb: members that inflate far past the archive's size are not read through to the end.
    bomb = tar_builder(tmp_path / "bomb.tar.gz", [({"name": "1/variables.data"}, bytes(8 << 20)),
                                                  ({"name": "code/inference.py"}, SCRIPT)])
    assert bomb.stat().st_size < 64 << 10 and module.read_inference_script(bomb) == SCRIPT
    monkeypatch.setattr(module, "SCRIPT_SCAN_MAX_BYTES", 1 << 20)
    assert module.read_inference_script(bomb) is None
    many = tar_builder(tmp_path / "many.tar.gz", [({"name": f"f{i}"}, b"") for i in range(20)]
                       + [({"name": "code/inference.py"}, SCRIPT)])
    assert module.read_inference_script(many) == SCRIPT
    monkeypatch.setattr(module, "SCRIPT_SCAN_MAX_MEMBERS", 10)
    assert module.read_inference_script(many) is None
