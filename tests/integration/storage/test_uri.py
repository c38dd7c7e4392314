import pytest

from tfbatch.errors import InvalidInput
from tfbatch.storage import uri as su


def test_normalize_local_forms(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert su.normalize("data/x.jpg") == str(tmp_path / "data" / "x.jpg")
    assert su.normalize(f"file://{tmp_path}/a") == f"{tmp_path}/a"
    assert su.normalize("data/") == f"{tmp_path}/data/"  # the folder marker survives
    assert su.normalize("s3a://b/k") == "s3://b/k"
    assert su.normalize("memory://b/k") == "memory://b/k"
    with pytest.raises(InvalidInput, match="no bucket"):
        su.normalize("s3:///k")
    with pytest.raises(InvalidInput):
        su.normalize("")


def test_protocols():
    assert su.protocol_of("/tmp/x") == "file"
    assert su.protocol_of("file:///tmp/x") == "file"
    assert su.protocol_of("S3://b/x") == "s3"
    assert su.protocol_of("memory://x") == "memory"


def test_join_and_unsafe_keys():
    assert su.join("s3://b/out", "a/b.jpg") == "s3://b/out/a/b.jpg"
    assert su.join("s3://b/out/", "a.jpg") == "s3://b/out/a.jpg"
    for bad in ("../x", "a/../../x", "/etc/passwd"):
        with pytest.raises(InvalidInput, match="relative key"):
            su.join("/tmp/out", bad)


def test_relative_key_uses_folder_part_of_prefix():
    assert su.relative_key("s3://b/data/", "s3://b/data/sub/x.jpg") == "sub/x.jpg"
    assert su.relative_key("s3://b/data/img", "s3://b/data/img1.jpg") == "img1.jpg"
    assert su.relative_key("s3://b/data/img", "s3://b/data/img/a.jpg") == "img/a.jpg"
    assert su.relative_key("s3://b/one.csv", "s3://b/one.csv") == "one.csv"
    assert su.relative_key("s3://b", "s3://b/k/x") == "k/x"
    assert su.dirname_prefix("s3://b") == "s3://b/"
    with pytest.raises(InvalidInput, match="not under prefix"):
        su.relative_key("s3://b/data/", "s3://b/other/x")


def test_get_fs_paths(tmp_path):
    fs, path = su.get_fs(f"file://{tmp_path}/a.txt")
    assert path == f"{tmp_path}/a.txt"
    fs.pipe_file(path, b"x")
    assert (tmp_path / "a.txt").read_bytes() == b"x"
    mfs, mpath = su.get_fs("memory://bucket/k")
    assert mpath == "/bucket/k"
    assert su.get_fs("memory://other")[0] is mfs  # cached per process


def test_s3_endpoint_comes_from_environment(s3_server, s3_bucket):
    s3_server.client().put_object(Bucket=s3_bucket, Key="k", Body=b"v")
    fs, path = su.get_fs(f"s3://{s3_bucket}/k")
    assert path == f"{s3_bucket}/k"
    assert fs.cat_file(path) == b"v"  # only reachable through AWS_ENDPOINT_URL


def test_changed_endpoint_gives_new_filesystem(s3_server, monkeypatch):
    fs1, _ = su.get_fs("s3://bkt/x")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    fs2, _ = su.get_fs("s3://bkt/x")
    assert fs2 is not fs1
    assert fs2.client_kwargs["endpoint_url"] == "http://127.0.0.1:9"
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3_server.endpoint_url)
    fs3, _ = su.get_fs("s3://bkt/x")
    assert fs3.client_kwargs["endpoint_url"] == s3_server.endpoint_url  # the S3-specific one wins


def test_s3fs_alone_honours_aws_endpoint_url(s3_server, s3_bucket):
    """Documents the stack's own behaviour: aiobotocore reads AWS_ENDPOINT_URL by itself."""
    import s3fs

    s3_server.client().put_object(Bucket=s3_bucket, Key="k", Body=b"v")
    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    assert fs.cat_file(f"{s3_bucket}/k") == b"v"


def test_normalize_fast_path_spells_local_paths_as_abspath_does():
    """Absolute paths already in canonical form skip abspath; every path must still come out
    exactly as the general rule spells it (abspath, trailing '/' kept)."""
    import os

    from hypothesis import given, settings
    from hypothesis import strategies as st

    from tfbatch.storage.uri import normalize

    def reference(path: str) -> str:
        trailing = path.endswith("/") and len(path) > 1
        out = os.path.abspath(os.path.expanduser(path))
        return out + "/" if trailing and not out.endswith("/") else out

    @settings(max_examples=500, deadline=None)
    @given(st.text(alphabet="/.a~b", min_size=1, max_size=12))
    def check(path):
        assert normalize(path) == reference(path)
        assert normalize("file://" + path) == reference(path)

    check()
