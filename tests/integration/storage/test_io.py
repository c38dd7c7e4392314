import os
import socket
import threading
import uuid

import fsspec
import pytest

from tfbatch.errors import NotFound
from tfbatch.storage import (
    ObjectNotFound,
    atomic_write,
    delete,
    exists,
    open_read,
    read_bytes,
    read_text,
    write_text,
)

MiB = 1024 * 1024


class Boom(RuntimeError):
    pass


def failing_chunks(n_ok: int, chunk: bytes):
    for _ in range(n_ok):
        yield chunk
    raise Boom("producer failed midway")


@pytest.fixture(params=["local", "memory", "s3"])
def root(request, tmp_path):
    if request.param == "local":
        return str(tmp_path)
    if request.param == "memory":
        return f"memory://io{uuid.uuid4().hex[:12]}"
    return f"s3://{request.getfixturevalue('s3_bucket')}"


def test_write_then_read_round_trip(root):
    uri = f"{root}/out/sub/a.jpg.out"
    assert not exists(uri)
    atomic_write(uri, [b"hello ", b"", b"world"])
    assert exists(uri)
    assert read_bytes(uri) == b"hello world"
    with open_read(uri) as f:
        assert f.read(5) == b"hello"
        assert f.read() == b" world"
    write_text(f"{root}/t.txt", "héllo")
    assert read_text(f"{root}/t.txt") == "héllo"
    delete(uri)
    assert not exists(uri)
    delete(uri)  # idempotent
    with pytest.raises(ObjectNotFound):
        delete(uri, missing_ok=False)


def test_missing_object_is_both_notfound_and_filenotfound(root):
    for fn in (read_bytes, open_read):
        with pytest.raises(NotFound, match="does not exist"):
            fn(f"{root}/missing.bin")
        with pytest.raises(FileNotFoundError):
            fn(f"{root}/missing.bin")


def test_exists_is_false_for_folders(root):
    atomic_write(f"{root}/dir/x", b"1")
    assert exists(f"{root}/dir/x")
    assert not exists(f"{root}/dir")
    assert not exists(f"{root}/dir/")


def test_failed_write_leaves_nothing(root):
    uri = f"{root}/out/never.out"
    with pytest.raises(Boom):
        atomic_write(uri, failing_chunks(2, b"x" * 1000))
    assert not exists(uri)


def test_failed_write_keeps_previous_object(root):
    uri = f"{root}/out/keep.out"
    atomic_write(uri, b"old")
    with pytest.raises(Boom):
        atomic_write(uri, failing_chunks(1, b"new"))
    assert read_bytes(uri) == b"old"


def test_local_failed_write_leaves_no_temp_files(tmp_path):
    with pytest.raises(Boom):
        atomic_write(str(tmp_path / "a" / "b.out"), failing_chunks(3, b"zz"))
    assert os.listdir(tmp_path / "a") == []


def test_local_write_permissions_follow_umask(tmp_path):
    path = tmp_path / "p.out"
    atomic_write(str(path), b"x")
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask


def test_local_target_invisible_until_complete(tmp_path):
    """While the producer is still yielding, the target name does not exist."""
    target = tmp_path / "slow.out"
    seen_during_write = []

    def chunks():
        yield b"a"
        seen_during_write.append(target.exists())
        yield b"b"

    atomic_write(f"file://{target}", chunks())
    assert seen_during_write == [False]
    assert target.read_bytes() == b"ab"


def test_s3_multipart_write_is_complete_and_verified_with_boto3(s3_server, s3_bucket):
    client = s3_server.client()
    chunks = [os.urandom(3 * MiB) for _ in range(4)]  # 12 MiB -> parts of 5+5+2 MiB
    seen_during_write = []

    def produce():
        for i, chunk in enumerate(chunks):
            if i == 3:
                listed = client.list_objects_v2(Bucket=s3_bucket, Prefix="big.out")
                seen_during_write.append(listed.get("KeyCount", 0))
            yield chunk

    atomic_write(f"s3://{s3_bucket}/big.out", produce(), chunk_size=5 * MiB)
    assert seen_during_write == [0]  # parts uploaded, object not yet visible
    head = client.head_object(Bucket=s3_bucket, Key="big.out")
    assert head["ContentLength"] == 12 * MiB
    assert "-3" in head["ETag"]  # a three-part multipart object
    assert client.get_object(Bucket=s3_bucket, Key="big.out")["Body"].read() == b"".join(chunks)


def test_s3_failed_multipart_write_is_aborted(s3_server, s3_bucket):
    client = s3_server.client()
    with pytest.raises(Boom):
        atomic_write(f"s3://{s3_bucket}/half.out", failing_chunks(2, b"y" * (3 * MiB)), chunk_size=5 * MiB)
    assert client.list_objects_v2(Bucket=s3_bucket).get("KeyCount", 0) == 0
    assert client.list_multipart_uploads(Bucket=s3_bucket).get("Uploads", []) == []


def test_s3_small_write_is_one_put_visible_to_boto3(s3_server, s3_bucket):
    atomic_write(f"s3://{s3_bucket}/k/v.out", b"payload")
    obj = s3_server.client().get_object(Bucket=s3_bucket, Key="k/v.out")
    assert obj["Body"].read() == b"payload"


def test_memory_write_creates_parents():
    root = f"memory://m{uuid.uuid4().hex[:8]}"
    atomic_write(f"{root}/deep/er/x", b"1")
    assert fsspec.filesystem("memory").cat_file(f"{root}/deep/er/x") == b"1"


def test_s3_chunk_size_floor(s3_bucket):
    with pytest.raises(ValueError, match="5 MiB"):
        atomic_write(f"s3://{s3_bucket}/x", b"1", chunk_size=1024)


class OutageProxy:
    """A TCP forwarder on a fixed loopback port that can drop every connection and refuse
    new ones for a while: a network outage between client and S3, with the data kept."""

    def __init__(self, target_port: int):
        self.target_port = target_port
        self.port = 0
        self._listener: socket.socket | None = None
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()

    def up(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(16)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def down(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
            conns, self._conns = self._conns, []
        if listener is not None:
            # close() alone would not wake the thread blocked in accept(), and the kernel
            # would keep accepting; shutdown() does wake it.
            try:
                listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            listener.close()
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            with self._lock:
                self._conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


@pytest.mark.parametrize("stack_retries", [True, False], ids=["with-s3fs-retries", "tfbatch-retries-only"])
def test_open_read_survives_a_network_outage_mid_stream(s3_server, s3_bucket, monkeypatch, stack_retries):
    """The connection to S3 drops after the first 8 MiB block was read and the endpoint
    refuses connections for a moment; the open stream resumes at its offset. With s3fs's and
    botocore's own retries turned off, only open_read's reopen-at-offset can save it."""
    import s3fs

    from tfbatch.storage import uri as su

    if not stack_retries:
        monkeypatch.setattr(s3fs.S3FileSystem, "retries", 1)
        monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    su.clear_cache()

    data = os.urandom(12 * MiB)  # two 8 MiB read-ahead blocks
    s3_server.client().put_object(Bucket=s3_bucket, Key="blob", Body=data)
    proxy = OutageProxy(s3_server.port)
    proxy.up()
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{proxy.port}")
    try:
        with open_read(f"s3://{s3_bucket}/blob", buffer_size=MiB) as f:
            head = f.read(MiB)
            proxy.down()
            reviver = threading.Timer(0.5, proxy.up)
            reviver.start()
            rest = f.read()
            reviver.join()
        assert head + rest == data
    finally:
        proxy.down()
        su.clear_cache()


def test_non_durable_local_write_is_still_atomic_and_complete(tmp_path):
    from tfbatch.storage import atomic_write, read_bytes

    target = tmp_path / "sub" / "marker"
    atomic_write(str(target), [b"a", b"b"], durable=False)
    assert read_bytes(str(target)) == b"ab"
    assert [p.name for p in target.parent.iterdir()] == ["marker"]  # no temp file left


def test_small_local_writes_replace_existing_and_leave_only_targets(tmp_path):
    """The many-small-outputs path (``durable=False``, byte parts): a rewrite of an existing
    output (a resumed job) replaces it whole; nothing but the targets is left in the folder."""
    folder = tmp_path / "out"
    for round_ in range(2):
        for i in range(20):
            parts = [b"round", str(round_).encode(), b"-", str(i).encode()]
            atomic_write(str(folder / f"{i}.out"), parts, durable=False)
    assert sorted(p.name for p in folder.iterdir()) == sorted(f"{i}.out" for i in range(20))
    assert all((folder / f"{i}.out").read_bytes() == f"round1-{i}".encode() for i in range(20))
    umask = os.umask(0)
    os.umask(umask)
    assert (folder / "0.out").stat().st_mode & 0o777 == 0o666 & ~umask


def test_small_local_write_into_a_folder_removed_behind_our_back(tmp_path):
    import shutil

    folder = tmp_path / "gone"
    atomic_write(str(folder / "a.out"), [b"1"], durable=False)
    shutil.rmtree(folder)
    atomic_write(str(folder / "b.out"), [b"2"], durable=False)
    assert [p.name for p in folder.iterdir()] == ["b.out"]


FORK_WRITER = """
import os, sys
from tfbatch.storage import atomic_write
folder = sys.argv[1]
atomic_write(os.path.join(folder, "parent-first.out"), [b"parent"], durable=False)
keep = [os.open(folder, os.O_RDONLY) for _ in range(3)]  # the child's fd numbers differ
pid = os.fork()
if pid == 0:
    for fd in keep:
        os.close(fd)
    atomic_write(os.path.join(folder, "child.out"), [b"child"], durable=False)
    os._exit(0)
os.waitpid(pid, 0)
atomic_write(os.path.join(folder, "parent-after.out"), [b"parent again"], durable=False)
"""


def test_small_local_writes_in_a_forked_child_name_the_childs_own_file(tmp_path):
    """The unnamed file is named through /proc/self/fd: a forked child must use its own
    descriptor table, not the parent's (which would link whatever the parent has open)."""
    import subprocess
    import sys

    subprocess.run([sys.executable, "-c", FORK_WRITER, str(tmp_path)], check=True, timeout=120)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == {
        "parent-first.out": b"parent", "child.out": b"child", "parent-after.out": b"parent again"}


KILLED_WRITER = """
import os, sys
from tfbatch.storage import atomic_write
folder, body = sys.argv[1], b"x" * 200_000
for i in range(100_000):
    atomic_write(os.path.join(folder, f"{i}.out"), [body], durable=False)
    print(i, flush=True)
"""


def test_small_local_writes_killed_leave_only_complete_outputs(tmp_path):
    """SIGKILL while writing outputs: every name in the folder is a whole output, and no
    temporary file is left behind (an unnamed file dies with the process)."""
    import signal
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        for line in proc.stdout:
            if int(line) >= 50:
                break
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    names = [p.name for p in tmp_path.iterdir()]
    assert len(names) >= 51
    assert all(n.endswith(".out") for n in names), names
    assert all(p.stat().st_size == 200_000 for p in tmp_path.iterdir())


def test_read_small_many_keeps_order_and_reports_each_failure_alone(s3_server, s3_bucket, tmp_path):
    from tfbatch.storage.io import read_small_many
    from tfbatch.storage.uri import clear_cache
    from tfbatch.testing.fault_proxy import FaultProxy

    s3 = s3_server.client()
    items = []
    for i in range(24):
        body = b"x" * i  # an empty object too
        s3.put_object(Bucket=s3_bucket, Key=f"many/{i:02d}", Body=body)
        items.append((f"s3://{s3_bucket}/many/{i:02d}", len(body)))
    local = tmp_path / "local.bin"
    local.write_bytes(b"on disk")
    items.insert(3, (f"s3://{s3_bucket}/many/missing", 5))
    items.insert(9, (str(local), 7))
    items.append((f"s3://{s3_bucket}/many/05", None))  # size not listed: read alone
    saved = os.environ["AWS_ENDPOINT_URL"]
    # Resets and throttling on the wire: a GET that fails in the shared round is read again
    # alone, with its retries, so every object still arrives.
    with FaultProxy(s3_server.endpoint_url, reset=0.15, slow_down=0.15, seed=3, only=frozenset({"GET"})) as proxy:
        os.environ["AWS_ENDPOINT_URL"] = proxy.endpoint_url
        clear_cache()
        try:
            got = read_small_many(items, in_flight=8)
        finally:
            os.environ["AWS_ENDPOINT_URL"] = saved
            clear_cache()
    assert proxy.faults["reset"] + proxy.faults["slow_down"] >= 2
    assert isinstance(got[3], ObjectNotFound) and "missing" in str(got[3])
    assert got[9] == b"on disk"
    rest = [g for k, g in enumerate(got) if k not in (3, 9)]
    assert rest == [b"x" * i for i in range(24)] + [b"x" * 5]
    assert proxy.max_in_flight["GET"] <= 8
