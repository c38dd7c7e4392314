"""Worker processes list and read S3 after the parent already used its s3fs instance.

A forked child inherits the parent's cached filesystem object, whose aiohttp session and
event-loop thread did not survive the fork; it must build its own. A spawned child starts
clean but must find the endpoint through the inherited environment.
"""

import multiprocessing as mp

import pytest

from tfbatch.storage import atomic_write, list_prefix, read_bytes
from tfbatch.storage.uri import get_fs

# Run by exec() in the child: builtins pickle by reference, so this works under 'spawn'
# without making the test module importable in the child.
CHILD_CODE = """
from tfbatch.storage import list_prefix, read_bytes, atomic_write
from tfbatch.storage.uri import get_fs
try:
    refs = list(list_prefix(prefix))
    data = [read_bytes(r.uri) for r in refs]
    atomic_write(prefix + "from-child.out", b"child")
    fs_id = id(get_fs(prefix)[0])
    queue.put(("ok", [r.key for r in refs], data, fs_id))
except BaseException as exc:
    queue.put(("error", repr(exc), None, None))
"""


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_child_process_uses_s3_after_parent(method, s3_server, s3_bucket):
    client = s3_server.client()
    for i in range(3):
        client.put_object(Bucket=s3_bucket, Key=f"in/{i}.jpg", Body=f"img{i}".encode())
    prefix = f"s3://{s3_bucket}/in/"
    # The parent uses the filesystem first, so there is a live session to (not) inherit.
    assert [r.key for r in list_prefix(prefix)] == ["0.jpg", "1.jpg", "2.jpg"]
    assert read_bytes(prefix + "0.jpg") == b"img0"
    parent_fs = get_fs(prefix)[0]

    ctx = mp.get_context(method)
    queue = ctx.Queue()
    proc = ctx.Process(target=exec, args=(CHILD_CODE, {"prefix": prefix, "queue": queue}))
    proc.start()
    try:
        status, keys, data, _ = queue.get(timeout=60)
    finally:
        proc.join(timeout=30)
    assert status == "ok", keys
    assert proc.exitcode == 0
    assert keys == ["0.jpg", "1.jpg", "2.jpg"]
    assert data == [b"img0", b"img1", b"img2"]
    assert client.get_object(Bucket=s3_bucket, Key="in/from-child.out")["Body"].read() == b"child"
    # And the parent's instance still works after the child is gone.
    assert get_fs(prefix)[0] is parent_fs
    assert read_bytes(prefix + "from-child.out") == b"child"
    atomic_write(prefix + "from-parent.out", b"parent")


def test_forked_child_builds_its_own_filesystem(s3_server, s3_bucket):
    prefix = f"s3://{s3_bucket}/"
    parent_fs = get_fs(prefix)[0]
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    code = "from tfbatch.storage.uri import get_fs\nqueue.put(id(get_fs(prefix)[0]))"
    proc = ctx.Process(target=exec, args=(code, {"prefix": prefix, "queue": queue}))
    proc.start()
    child_fs_id = queue.get(timeout=60)
    proc.join(timeout=30)
    # Same address space layout after fork: equal ids would mean the inherited object.
    assert child_fs_id != id(parent_fs)
