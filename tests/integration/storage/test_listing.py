import json
import os
import uuid
from concurrent.futures import ThreadPoolExecutor

import fsspec
import pytest

from tfbatch.errors import ConfigError
from tfbatch.storage import ObjectRef, iter_pages, list_manifest, list_prefix, read_manifest, write_text

NESTED = {
    "data/img1.jpg": b"1",
    "data/img/a.jpg": b"aa",
    "data/img/b/c.jpg": b"ccc",
    "data/img-x.jpg": b"x",
    "data/imx.jpg": b"no",
    "database.csv": b"d",
    "other/img1.jpg": b"o",
}


class Store:
    """A root URI on one backend plus a way to put objects there without tfbatch."""

    def __init__(self, kind, root, put):
        self.kind, self.root, self._put = kind, root, put

    def put(self, key, data):
        self._put(key, data)


@pytest.fixture(params=["local", "memory", "s3"])
def store(request, tmp_path):
    if request.param == "local":

        def put(key, data):
            path = tmp_path / key
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)

        return Store("local", str(tmp_path), put)
    if request.param == "memory":
        root = f"memory://t{uuid.uuid4().hex[:12]}"
        fs = fsspec.filesystem("memory")
        return Store("memory", root, lambda key, data: fs.pipe_file(f"{root}/{key}", data))
    server = request.getfixturevalue("s3_server")
    bucket = request.getfixturevalue("s3_bucket")
    client = server.client()
    return Store("s3", f"s3://{bucket}", lambda key, data: client.put_object(Bucket=bucket, Key=key, Body=data))


def fill(store, objects):
    for key, data in objects.items():
        store.put(key, data)


def test_folder_prefix_lists_nested_keys_in_s3_order(store):
    fill(store, NESTED)
    refs = list(list_prefix(f"{store.root}/data/"))
    keys = [r.key for r in refs]
    # S3 orders by full key: '-' (0x2d) < '/' (0x2f) < '1' < 'x'.
    assert keys == ["img-x.jpg", "img/a.jpg", "img/b/c.jpg", "img1.jpg", "imx.jpg"]
    assert refs[1] == ObjectRef(uri=f"{store.root}/data/img/a.jpg", key="img/a.jpg", size=2)
    assert [r.size for r in refs] == [1, 2, 3, 1, 2]


def test_prefix_is_not_only_a_folder(store):
    fill(store, NESTED)
    keys = [r.key for r in list_prefix(f"{store.root}/data/img")]
    if store.kind == "local":
        # An existing local folder is listed as a folder.
        assert keys == ["a.jpg", "b/c.jpg"]
    else:
        assert keys == ["img-x.jpg", "img/a.jpg", "img/b/c.jpg", "img1.jpg"]
    keys = [r.key for r in list_prefix(f"{store.root}/data/img1")]
    assert keys == ["img1.jpg"]
    keys = [r.key for r in list_prefix(f"{store.root}/data/im")]
    assert keys == ["img-x.jpg", "img/a.jpg", "img/b/c.jpg", "img1.jpg", "imx.jpg"]


def test_filename_prefix_on_local_disk(tmp_path):
    for name in ("img1.jpg", "img2.jpg", "other.jpg"):
        (tmp_path / name).write_bytes(b"z")
    (tmp_path / "imgdir").mkdir()
    (tmp_path / "imgdir" / "x.jpg").write_bytes(b"z")
    refs = list(list_prefix(f"file://{tmp_path}/img"))
    assert [r.key for r in refs] == ["img1.jpg", "img2.jpg", "imgdir/x.jpg"]
    assert refs[2].uri == f"{tmp_path}/imgdir/x.jpg"
    assert list(list_prefix(str(tmp_path / "nothing-here" / "x"))) == []


def test_single_object_prefix_keys_by_file_name(store):
    fill(store, NESTED)
    refs = list(list_prefix(f"{store.root}/database.csv"))
    assert [(r.uri, r.key) for r in refs] == [(f"{store.root}/database.csv", "database.csv")]


def test_empty_prefix_lists_nothing(store):
    fill(store, NESTED)
    assert list(list_prefix(f"{store.root}/nope/")) == []


def test_s3_directory_markers_are_skipped(s3_server, s3_bucket):
    client = s3_server.client()
    for key in ("in/", "in/sub/", "in/sub/x.jpg"):
        client.put_object(Bucket=s3_bucket, Key=key, Body=b"" if key.endswith("/") else b"x")
    assert [r.key for r in list_prefix(f"s3://{s3_bucket}/in/")] == ["sub/x.jpg"]


def test_missing_bucket_is_an_error(s3_server):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        list(list_prefix("s3://no-such-bucket-here/x"))


@pytest.fixture(scope="module")
def big_bucket(s3_server):
    """2,500 objects, uploaded once for the module with boto3 (in parallel: it is HTTP)."""
    bucket = f"big-{uuid.uuid4().hex[:12]}"
    client = s3_server.client()
    client.create_bucket(Bucket=bucket)
    keys = [f"p/{i // 100:02d}/{i:05d}.bin" for i in range(2500)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda k: client.put_object(Bucket=bucket, Key=k, Body=k.encode()), keys))
    return bucket, sorted(keys)


def test_large_prefix_is_listed_in_pages(big_bucket):
    bucket, keys = big_bucket
    pages = list(iter_pages(f"s3://{bucket}/p/", page_size=1000))
    assert [len(p) for p in pages] == [1000, 1000, 500]
    listed = [r.key for page in pages for r in page]
    assert listed == [k[len("p/"):] for k in keys]
    assert len(list(list_prefix(f"s3://{bucket}/p/"))) == 2500  # default page size


def test_listing_streams_before_the_prefix_is_fully_listed(s3_server, big_bucket):
    """Take one object, then add a key that sorts last: a lister that had already fetched
    everything could not see it; a streaming one fetches later pages only when asked."""
    bucket, keys = big_bucket
    client = s3_server.client()
    it = list_prefix(f"s3://{bucket}/p/", page_size=500)
    first = next(it)
    assert first.key == keys[0][len("p/"):]
    client.put_object(Bucket=bucket, Key="p/zz-late.bin", Body=b"late")
    try:
        rest = [r.key for r in it]
        assert rest[-1] == "zz-late.bin"
        assert len(rest) == 2500  # 2,499 remaining + the late one
    finally:
        client.delete_object(Bucket=bucket, Key="p/zz-late.bin")


def test_local_listing_streams_too(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "1").write_bytes(b"1")
    (tmp_path / "b").mkdir()
    it = list_prefix(str(tmp_path))
    assert next(it).key == "a/1"
    (tmp_path / "b" / "2").write_bytes(b"2")
    # Folder b is scanned only after the first object was handed out.
    assert [r.key for r in it] == ["b/2"]
    pages = list(iter_pages(str(tmp_path), page_size=1))
    assert [[r.key for r in p] for p in pages] == [["a/1"], ["b/2"]]


# ---- ManifestFile --------------------------------------------------------------------------


def test_manifest_round_trip(store):
    fill(store, NESTED)
    manifest = [{"prefix": f"{store.root}/data/"}, "img/a.jpg", "img1.jpg"]
    write_text(f"{store.root}/m.json", json.dumps(manifest))
    prefix, keys = read_manifest(f"{store.root}/m.json")
    assert prefix == f"{store.root}/data/"
    assert keys == ["img/a.jpg", "img1.jpg"]
    refs = list(list_manifest(f"{store.root}/m.json"))
    assert [(r.uri, r.key) for r in refs] == [
        (f"{store.root}/data/img/a.jpg", "img/a.jpg"),
        (f"{store.root}/data/img1.jpg", "img1.jpg"),
    ]


def test_manifest_prefix_without_slash_is_joined_with_one(tmp_path):
    path = tmp_path / "m.json"
    path.write_text(json.dumps([{"prefix": "s3://b/p"}, "x.jpg"]))
    assert [r.uri for r in list_manifest(str(path))] == ["s3://b/p/x.jpg"]


@pytest.mark.parametrize(
    "content, expected",
    [
        ("not json", "invalid JSON"),
        ('{"prefix": "s3://b/"}', "expected a JSON array"),
        ("[]", "empty array"),
        ('["a.jpg"]', 'first element to be {"prefix"'),
        ('[{"Prefix": "s3://b/"}, "a"]', 'first element to be {"prefix"'),
        ('[{"prefix": ""}, "a"]', 'first element to be {"prefix"'),
        ('[{"prefix": "s3://b/"}, 3]', "element 1: expected a non-empty key string, got 3"),
        ('[{"prefix": "s3://b/"}, "a", ""]', "element 2: expected a non-empty key"),
        ('[{"prefix": "s3://b/"}, "../etc/passwd"]', "no '..'"),
        ('[{"prefix": "s3://b/"}, "/abs"]', "no leading '/'"),
        ('[{"prefix": "s3://b/"}, "a", "a"]', "listed twice"),
    ],
)
def test_malformed_manifest(tmp_path, content, expected):
    path = tmp_path / "bad.manifest"
    path.write_text(content)
    with pytest.raises(ConfigError) as info:
        read_manifest(str(path))
    assert expected in str(info.value)
    assert "bad.manifest" in str(info.value)  # names the file


def test_missing_manifest(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        read_manifest(os.path.join(tmp_path, "none.json"))


def test_empty_manifest_lists_nothing(tmp_path):
    path = tmp_path / "m.json"
    path.write_text('[{"prefix": "s3://b/p/"}]')
    assert read_manifest(str(path)) == ("s3://b/p/", [])


def test_s3_prefix_matching_only_a_folder_is_that_folder(s3_server, s3_bucket):
    """The seed-000 notebook's input ``.../open-images/jpg`` (no '/'): outputs are read back as
    ``{output_path}/<id>.jpg.out``, so the keys are relative to the folder, as for a local one."""
    s3 = s3_server.client()
    for key in ("data/jpg/a.jpg", "data/jpg/b/c.jpg", "data/other.jpg"):
        s3.put_object(Bucket=s3_bucket, Key=key, Body=b"x")
    refs = list(list_prefix(f"s3://{s3_bucket}/data/jpg"))
    assert [r.key for r in refs] == ["a.jpg", "b/c.jpg"]
    assert refs[0].uri == f"s3://{s3_bucket}/data/jpg/a.jpg"
    # A name that also matches a sibling object stays a plain name prefix.
    s3.put_object(Bucket=s3_bucket, Key="data/jpg1.png", Body=b"x")
    assert [r.key for r in list_prefix(f"s3://{s3_bucket}/data/jpg")] == ["jpg/a.jpg", "jpg/b/c.jpg", "jpg1.png"]
