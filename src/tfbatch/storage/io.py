"""Reading and writing whole objects, with retries and all-or-nothing writes.

An output object must never be seen half-written: the ledger and a resumed job treat "the
object exists" as "the object is done". Locally that is a temporary file renamed over the
target (or, for a job's many small outputs, an unnamed ``O_TMPFILE`` linked into place); on
S3 it is one PUT, or a multipart upload completed only after the last part (and aborted on
any error, so no parts linger to be billed).
"""

from __future__ import annotations

import functools
import hashlib
import io
import logging
import os
import random
import re
import secrets
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any, BinaryIO

from tfbatch.errors import NotFound
from tfbatch.storage.backoff import backoff_delay, default_attempts, is_transient, retry
from tfbatch.storage.uri import LOCAL, get_fs, normalize, protocol_of, split_s3

log = logging.getLogger(__name__)

__all__ = [
    "ObjectNotFound",
    "open_read",
    "read_bytes",
    "read_text",
    "atomic_write",
    "write_text",
    "exists",
    "delete",
    "retry",
    "is_transient",
    "MULTIPART_CHUNK",
    "TEMP_NAME",
    "temp_name",
    "make_dirs",
    "sync_local",
]

# S3 refuses parts under 5 MiB (except the last); bigger parts mean fewer requests.
MULTIPART_CHUNK = 8 * 1024 * 1024
_READ_BLOCK = 8 * 1024 * 1024


class ObjectNotFound(NotFound, FileNotFoundError):
    """The object does not exist (catchable as either NotFound or FileNotFoundError)."""


def _not_found(uri: str, exc: BaseException) -> ObjectNotFound:
    err = ObjectNotFound(f"object '{uri}' does not exist")
    err.__cause__ = exc
    return err


def _open_raw(uri: str, size: int | None = None, attempts: int | None = None) -> BinaryIO:
    fs, path = get_fs(uri)
    try:
        if protocol_of(uri) == "s3":
            # s3fs defaults to 50 MiB read-ahead blocks; many workers x that is too much memory.
            # A size known from the listing spares the HEAD request s3fs would send for it.
            extra = {"size": size} if size is not None else {}
            return retry(lambda: fs.open(path, "rb", block_size=_READ_BLOCK, **extra), attempts=attempts)
        return retry(lambda: fs.open(path, "rb"), attempts=attempts)
    except FileNotFoundError as exc:
        raise _not_found(uri, exc) from exc


class _RetryingReader(io.RawIOBase):
    """A read-only stream that reopens at the current offset after a transient failure."""

    def __init__(self, uri: str, attempts: int | None = None, size: int | None = None):
        super().__init__()
        self._uri = uri
        self._attempts = attempts or default_attempts()
        self._pos = 0
        self._size = size
        self._f: BinaryIO | None = _open_raw(uri, size)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        assert self._f is not None
        self._pos = self._f.seek(offset, whence)
        return self._pos

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        for attempt in range(self._attempts):
            try:
                if self._f is None:
                    # one request: the reopen counts against this read's attempts, not a nested loop
                    self._f = _open_raw(self._uri, self._size, attempts=1)
                    self._f.seek(self._pos)
                data = self._f.read(len(view))
                break
            except Exception as exc:
                if not is_transient(exc):
                    raise
                if attempt == self._attempts - 1:
                    log.warning("storage: reading %s gave up after %d attempts: %s", self._uri, self._attempts, exc)
                    raise
                delay = backoff_delay(attempt)
                log.warning("storage: reading %s failed at offset %d (%s: %s); reopening in %.2fs",
                            self._uri, self._pos, type(exc).__name__, exc, delay)
                self._drop()
                time.sleep(delay)
        n = len(data)
        view[:n] = data
        self._pos += n
        return n

    def _drop(self) -> None:
        f, self._f = self._f, None
        if f is not None:
            try:
                f.close()
            except Exception:
                pass

    def close(self) -> None:
        self._drop()
        super().close()


def open_read(uri: str, buffer_size: int = 1024 * 1024, *, size: int | None = None) -> BinaryIO:
    """A buffered binary stream over ``uri``; raises ObjectNotFound if it does not exist.

    ``size``: the object's size if known (from the listing), which saves a request.
    """
    uri = normalize(uri)
    if protocol_of(uri) == LOCAL:
        try:
            return open(uri, "rb", buffering=buffer_size)  # noqa: SIM115 - caller closes
        except FileNotFoundError as exc:
            raise _not_found(uri, exc) from exc
    if size is not None and size <= _READ_BLOCK:
        # Small objects (most batch inputs): one GET. Streaming through s3fs's file would
        # cost a HEAD as well (it checks the ETag), doubling requests per object; the
        # whole object is no more memory than one read-ahead block.
        fs, path = get_fs(uri)
        try:
            # max_concurrency=1: s3fs would otherwise HEAD the object to decide on ranged GETs.
            data = retry(lambda: fs.cat_file(path, max_concurrency=1))
        except FileNotFoundError as exc:
            raise _not_found(uri, exc) from exc
        return io.BytesIO(data)  # type: ignore[return-value]
    return io.BufferedReader(_RetryingReader(uri, size=size), buffer_size=buffer_size)  # type: ignore[return-value]


def read_small(uri: str, size: int | None = None) -> bytes:
    """A whole object, in as few system calls as the backend allows.

    Local files: open, one read of the listed size (plus one byte, to notice growth), close —
    no buffered stream, fstat or seek per file, which is most of the system time when a job
    reads many small files. Elsewhere it is ``open_read`` (one GET for small listed sizes).
    """
    uri = normalize(uri)
    if protocol_of(uri) != LOCAL:
        with open_read(uri, size=size) as f:
            return f.read()
    try:
        fd = os.open(uri, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError as exc:
        raise _not_found(uri, exc) from exc
    try:
        want = (size if size is not None else 64 * 1024) + 1
        data = os.read(fd, want)
        if size is not None and len(data) == size:
            return data  # as listed: a regular file reads whole up to its end
        parts = [data]
        while data:
            data = os.read(fd, max(want, 1024 * 1024))
            parts.append(data)
        return b"".join(parts)
    finally:
        os.close(fd)


# Requests a reader or writer of many objects keeps in flight to a store (the dataflow's reads
# and writes, ``read_small_many``, the Ray reader task): a GET or PUT is a round trip (tens of
# ms on S3 for a small object) that costs the client ~2 ms of CPU, so it is latency, not CPU,
# that bounds one request at a time. With 8 reads in flight and 20 ms added to each request,
# a JPEG job ran at 113 objects/s, half the expert's tf.data script with 32 boto3 threads
# (benchmarks/transform/s3/README.md). storage/s3options.py sizes the connection pool to match.
STORE_REQUESTS_IN_FLIGHT = 32


def read_small_many(items: list[tuple[str, int | None]], in_flight: int = STORE_REQUESTS_IN_FLIGHT
                    ) -> list[bytes | Exception]:
    """``read_small`` for each ``(uri, listed size)``: the bytes, or the exception that read raised.

    Objects of an asynchronous store (S3 through s3fs) whose listed size is at most one read
    block are fetched in one round of concurrent GETs on fsspec's event loop, ``in_flight``
    at a time: one hand-off between this thread and the loop for the whole list instead of a
    thread and a hand-off per object (a 5,000-JPEG job on the moto server: 9-16 % less CPU for
    the whole process, benchmarks/transform/s3/README.md). A missing object is reported as
    ``read_small`` reports it; any other object whose GET fails there is read again alone by
    ``read_small``, with its retries, so it fails or succeeds as a single read does (a
    transient failure may cost one request more than a single read's bound). Everything else (local files, other stores, large or unlisted objects)
    is read by ``read_small`` one after another.
    """
    out: list[bytes | Exception | None] = [None] * len(items)
    batch: list[tuple[int, str]] = []
    fs = None
    for i, (uri, size) in enumerate(items):
        if protocol_of(uri) != LOCAL and size is not None and size <= _READ_BLOCK:
            item_fs, path = get_fs(uri)
            if getattr(item_fs, "async_impl", False) and (fs is None or item_fs is fs):
                fs = item_fs
                batch.append((i, path))
    if len(batch) > 1:
        from fsspec.asyn import sync

        async def fetch_all() -> list:
            import asyncio

            gate = asyncio.Semaphore(max(1, in_flight))

            async def fetch(path: str) -> bytes:
                async with gate:
                    return await fs._cat_file(path, max_concurrency=1)

            return await asyncio.gather(*(fetch(path) for _, path in batch), return_exceptions=True)

        try:
            fetched = sync(fs.loop, fetch_all)
        except Exception:  # noqa: BLE001 - the loop itself failed: every object is read alone below
            fetched = [None] * len(batch)
        for (i, _), data in zip(batch, fetched):
            if isinstance(data, bytes):
                out[i] = data
            elif isinstance(data, FileNotFoundError):  # gone since the listing: no second GET
                out[i] = _not_found(items[i][0], data)
    for i, (uri, size) in enumerate(items):
        if out[i] is None:
            try:
                out[i] = read_small(uri, size)
            except Exception as exc:  # noqa: BLE001 - the caller decides per object
                out[i] = exc
    return out  # type: ignore[return-value]


def read_bytes(uri: str) -> bytes:
    uri = normalize(uri)
    fs, path = get_fs(uri)
    try:
        return retry(lambda: fs.cat_file(path))
    except FileNotFoundError as exc:
        raise _not_found(uri, exc) from exc


def read_text(uri: str, encoding: str = "utf-8") -> str:
    return read_bytes(uri).decode(encoding)


def _chunks(data: bytes | bytearray | memoryview | Iterable[bytes]) -> Iterator[bytes]:
    if isinstance(data, (bytes, bytearray, memoryview)):
        yield bytes(data)
    else:
        for chunk in data:
            if chunk:
                yield bytes(chunk)


# Temporary names carry a hash of the target's name, not the name itself: a 250-character
# file name plus a prefix and suffix would pass the 255-byte NAME_MAX (ENAMETOOLONG), and two
# targets never share a temporary file because each also gets 12 random hex digits.
TEMP_NAME = re.compile(r"^\.tfb-[0-9a-f]{16}-[0-9a-f]{12}\.tmp$")
_LEGACY_TEMP_NAME = re.compile(r"^\..+\.tmp-[0-9a-f]{12}$")


_TEMP_RANDOM: tuple[int, random.Random] | None = None


def _temp_suffix() -> str:
    # 48 random bits from a generator seeded once per process from the OS (re-seeded after a
    # fork), not a getrandom() system call per output file.
    global _TEMP_RANDOM
    state = _TEMP_RANDOM
    if state is None or state[0] != os.getpid():
        state = _TEMP_RANDOM = (os.getpid(), random.Random(secrets.randbits(128)))
    return f"{state[1].getrandbits(48):012x}"


def temp_name(basename: str) -> str:
    digest = hashlib.blake2b(basename.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()
    return f".tfb-{digest}-{_temp_suffix()}.tmp"


def is_temp_name(name: str) -> bool:
    return bool(TEMP_NAME.match(name) or _LEGACY_TEMP_NAME.match(name))


# Folders this process has created or seen: a job writing 10M outputs into a few folders
# would otherwise pay a failing mkdir per object. Bounded so a tree of millions of folders
# cannot grow it without limit (a miss only costs one makedirs).
_MADE_DIRS: set[str] = set()
_MADE_DIRS_MAX = 100_000
_MADE_DIRS_LOCK = threading.Lock()


def make_dirs(folder: str) -> None:
    if folder in _MADE_DIRS:
        return
    os.makedirs(folder, exist_ok=True)
    with _MADE_DIRS_LOCK:
        if len(_MADE_DIRS) >= _MADE_DIRS_MAX:
            _MADE_DIRS.clear()
        _MADE_DIRS.add(folder)


def _fsync_dir(folder: str) -> None:
    try:
        dir_fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)


def sync_local(path: str) -> None:
    """Make every write and rename on the local filesystem holding ``path`` durable, in one call.

    Group commit: many ``.out`` files written with ``durable=False`` cost one ``syncfs`` per
    group instead of two fsyncs each. Where libc has no ``syncfs``, ``os.sync`` (every
    filesystem) does the same job more broadly.
    """
    folder = path[len("file://"):] if path.startswith("file://") else path
    while folder and not os.path.isdir(folder):
        folder = os.path.dirname(folder)
    syncfs = _syncfs()
    if syncfs is None:
        os.sync()
        return
    fd = os.open(folder or ".", os.O_RDONLY)
    try:
        if syncfs(fd) != 0:
            os.sync()
    finally:
        os.close(fd)


@functools.cache
def _syncfs():
    """libc's syncfs (Linux), from the symbols already in this process; None elsewhere."""
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        return None


def _atomic_write_local(path: str, data: Any, durable: bool = True) -> None:
    folder = os.path.dirname(path) or "."
    make_dirs(folder)
    if not durable and isinstance(data, (list, tuple)) and all(isinstance(c, bytes) for c in data):
        _write_small_local(folder, path, data)
        return
    tmp = os.path.join(folder, temp_name(os.path.basename(path)))
    fd = _create_temp(folder, tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        with os.fdopen(fd, "wb") as f:
            for chunk in _chunks(data):
                f.write(chunk)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        _unlink_if_there(tmp)
        raise
    if durable:
        _fsync_dir(folder)  # the rename itself


# Per process: the descriptor of /proc/self/fd (which names the opener's own table, so a
# forked child opens its own), and the folders whose filesystem refused O_TMPFILE.
_PROC_FD: tuple[int, int] | None = None
_NO_TMPFILE: set[str] = set()
_O_TMPFILE = getattr(os, "O_TMPFILE", 0)


def _no_tmpfile(folder: str) -> None:
    # Bounded like _MADE_DIRS: a tree of millions of folders cannot grow it without limit (a
    # miss only costs one refused open).
    if len(_NO_TMPFILE) >= _MADE_DIRS_MAX:
        _NO_TMPFILE.clear()
    _NO_TMPFILE.add(folder)


def _proc_fd() -> int:
    global _PROC_FD
    state = _PROC_FD
    if state is None or state[0] != os.getpid():
        state = _PROC_FD = (os.getpid(), os.open("/proc/self/fd", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
    return state[1]


def _write_unnamed_local(folder: str, path: str, view: memoryview) -> bool:
    """Write ``view`` into an unnamed file in ``folder`` (Linux ``O_TMPFILE``), then give it
    its name with one ``linkat``: complete or absent, like a renamed temporary file, at one
    directory change instead of two (create, rename), and the directory is not locked while
    the filesystem allocates the inode. A killed process leaves nothing behind (the kernel
    frees an unnamed file), so no ``.tmp`` is left to clean up. False where the platform or
    the filesystem has no ``O_TMPFILE`` (the caller then uses a named temporary file)."""
    if not _O_TMPFILE or folder in _NO_TMPFILE:
        return False
    try:
        fd = os.open(folder, _O_TMPFILE | os.O_WRONLY | os.O_CLOEXEC, 0o666)
    except FileNotFoundError:
        raise
    except OSError:  # EOPNOTSUPP, EISDIR (kernel without it), EINVAL: not this filesystem
        _no_tmpfile(folder)
        return False
    try:
        _write_all(fd, view)
        try:
            proc = _proc_fd()
        except OSError:  # no /proc: the file cannot be named
            _no_tmpfile(folder)
            return False
        try:
            os.link(str(fd), path, src_dir_fd=proc, follow_symlinks=True)
        except FileExistsError:
            # A rewrite (a resumed or repeated job): linkat never replaces, so name it
            # beside the target and rename over it, still atomic for readers.
            tmp = os.path.join(folder, temp_name(os.path.basename(path)))
            os.link(str(fd), tmp, src_dir_fd=proc, follow_symlinks=True)
            try:
                os.replace(tmp, path)
            except BaseException:
                _unlink_if_there(tmp)
                raise
    finally:
        os.close(fd)
    return True


def _write_small_local(folder: str, path: str, parts: list[bytes] | tuple[bytes, ...]) -> None:
    # The many-small-outputs case (the ledger makes the group durable later): raw descriptors,
    # skipping the buffered file object's fstat and flushes; an unnamed file linked into place
    # where the filesystem can, else a named temporary file renamed over the target.
    data = memoryview(parts[0] if len(parts) == 1 else b"".join(parts))
    try:
        if _write_unnamed_local(folder, path, data):
            return
    except FileNotFoundError:  # the folder was removed behind our back: made again below
        _MADE_DIRS.discard(folder)
        make_dirs(folder)
    tmp = os.path.join(folder, temp_name(os.path.basename(path)))
    fd = _create_temp(folder, tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0))
    try:
        try:
            _write_all(fd, data)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        _unlink_if_there(tmp)
        raise


def _write_all(fd: int, view: memoryview) -> None:
    while view:
        view = view[os.write(fd, view):]


def _create_temp(folder: str, tmp: str, flags: int) -> int:
    # 0o666 lets the umask decide permissions, as a plain open() would. The folder is made
    # once per process (make_dirs caches it), so one removed behind our back is made again.
    try:
        return os.open(tmp, flags, 0o666)
    except FileNotFoundError:
        _MADE_DIRS.discard(folder)
        make_dirs(folder)
        return os.open(tmp, flags, 0o666)


def _unlink_if_there(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _atomic_write_s3(uri: str, data: Any, chunk_size: int) -> None:
    fs, _ = get_fs(uri)
    bucket, key = split_s3(uri)
    chunks = _chunks(data)
    buf = bytearray()
    upload_id: str | None = None
    parts: list[dict[str, Any]] = []

    def put_part(body: bytes) -> None:
        number = len(parts) + 1
        resp = retry(
            lambda: fs.call_s3(
                "upload_part", Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=body
            )
        )
        parts.append({"PartNumber": number, "ETag": resp["ETag"]})

    try:
        for chunk in chunks:
            buf += chunk
            while len(buf) >= chunk_size:
                if upload_id is None:
                    upload_id = retry(lambda: fs.call_s3("create_multipart_upload", Bucket=bucket, Key=key))[
                        "UploadId"
                    ]
                put_part(bytes(buf[:chunk_size]))
                del buf[:chunk_size]
        if upload_id is None:
            body = bytes(buf)
            retry(lambda: fs.call_s3("put_object", Bucket=bucket, Key=key, Body=body))
        else:
            if buf:
                put_part(bytes(buf))
            retry(
                lambda: fs.call_s3(
                    "complete_multipart_upload",
                    Bucket=bucket,
                    Key=key,
                    UploadId=upload_id,
                    MultipartUpload={"Parts": parts},
                )
            )
    except BaseException:
        if upload_id is not None:
            try:
                fs.call_s3("abort_multipart_upload", Bucket=bucket, Key=key, UploadId=upload_id)
            except Exception:
                pass  # the original error matters more; a lifecycle rule cleans leftovers
        raise
    finally:
        fs.invalidate_cache(f"{bucket}/{key}")


def atomic_write(
    uri: str,
    data: bytes | bytearray | memoryview | Iterable[bytes],
    *,
    chunk_size: int = MULTIPART_CHUNK,
    durable: bool = True,
) -> None:
    """Write ``data`` to ``uri`` so the object appears only once complete.

    ``data`` may be bytes or an iterable of byte chunks (consumed once). If the iterable
    raises, nothing is left at ``uri`` (a previous object there stays as it was).
    ``durable=False`` skips the local fsyncs: still atomic for readers and across a killed
    process, but a power loss may drop the file (for markers whose loss only redoes work).
    """
    uri = normalize(uri)
    proto = protocol_of(uri)
    if proto == LOCAL:
        _atomic_write_local(uri, data, durable)
    elif proto == "s3":
        if chunk_size < 5 * 1024 * 1024:
            raise ValueError(f"chunk_size: S3 parts must be >= 5 MiB, got {chunk_size}")
        _atomic_write_s3(uri, data, chunk_size)
    else:
        # Other fsspec backends: gather first, then one put, so a failing iterable writes nothing.
        body = b"".join(_chunks(data))
        fs, path = get_fs(uri)
        parent = fs._parent(path)
        if parent:
            fs.makedirs(parent, exist_ok=True)
        retry(lambda: fs.pipe_file(path, body))


def write_text(uri: str, text: str, encoding: str = "utf-8", *, durable: bool = True) -> None:
    atomic_write(uri, text.encode(encoding), durable=durable)


def exists(uri: str) -> bool:
    """Whether an object (a file, not a folder or a key prefix) exists at ``uri``."""
    uri = normalize(uri)
    proto = protocol_of(uri)
    if proto == LOCAL:
        return os.path.isfile(uri)
    fs, path = get_fs(uri)
    if proto == "s3":
        bucket, key = split_s3(uri)
        if not key or key.endswith("/"):
            return False
        try:
            retry(lambda: fs.call_s3("head_object", Bucket=bucket, Key=key))
            return True
        except FileNotFoundError:
            return False
    return bool(retry(lambda: fs.isfile(path)))


def delete(uri: str, *, missing_ok: bool = True) -> None:
    """Delete one object; a missing object is fine unless ``missing_ok`` is False."""
    uri = normalize(uri)
    if not missing_ok and not exists(uri):
        raise ObjectNotFound(f"object '{uri}' does not exist")
    proto = protocol_of(uri)
    if proto == LOCAL:
        _unlink_if_there(uri)
        return
    fs, path = get_fs(uri)
    if proto == "s3":
        bucket, key = split_s3(uri)
        retry(lambda: fs.call_s3("delete_object", Bucket=bucket, Key=key))
        fs.invalidate_cache(path)
        return
    try:
        retry(lambda: fs.rm_file(path))
    except FileNotFoundError:
        pass
