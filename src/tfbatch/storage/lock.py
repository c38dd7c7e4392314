"""One job per output prefix: a file lock locally, a lease object with expiry on S3.

Two jobs writing the same prefix would clean up each other's temporary files and record
each other's objects; so a job holds the prefix for its whole run.

Local: ``<prefix>/_tfbatch/lock`` locked with ``fcntl.flock``. The kernel drops the lock
when its holder dies (SIGKILL included), so a stale lock cannot exist; the file's
content (pid, host, start time) only serves the message a refused job prints.

S3 (and other object stores): a lease object ``<prefix>/_tfbatch/lock.json`` created with
a conditional PUT (``If-None-Match: *``), so of two jobs starting at once exactly one
wins. The holder renews it (``If-Match`` its own ETag) every third of its time to live;
a holder that died stops renewing, and once the lease has expired another job may take
it over, again with ``If-Match`` on the expired lease's ETag so two waiting jobs cannot
both take it. The moto S3 test server honours both conditions (checked in the tests).
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from typing import Any

from tfbatch.errors import TfbatchError
from tfbatch.storage.backoff import retry
from tfbatch.storage.io import make_dirs
from tfbatch.storage.uri import LOCAL, get_fs, join, normalize, protocol_of, split_s3

LEASE_TTL_S = 60.0


class OutputLocked(TfbatchError):
    """Another job holds the output prefix."""

    status = 409
    grpc_code = "ABORTED"


def _holder() -> dict[str, Any]:
    return {"pid": os.getpid(), "host": socket.gethostname(), "since": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                                   time.gmtime())}


def _describe(prefix: str, holder: dict | None) -> str:
    who = "another job"
    if holder:
        who = f"job pid {holder.get('pid')} on host {holder.get('host')} (since {holder.get('since')})"
    return (f"output prefix '{prefix}' is in use by {who}; two jobs on one output would overwrite each other's "
            "files. Wait for it to finish, pass --wait-lock to wait, or choose another output")


class OutputLock:
    """``with OutputLock(prefix, wait=False): ...``; raises OutputLocked when refused."""

    def __init__(self, prefix: str, *, wait: bool = False, ttl_s: float = LEASE_TTL_S,
                 poll_s: float = 1.0, sleep=time.sleep):
        self.prefix = normalize(prefix)
        self.wait = wait
        self.ttl_s = ttl_s
        self.poll_s = poll_s
        self.sleep = sleep
        self.local = protocol_of(self.prefix) == LOCAL
        self._fd: int | None = None
        self._etag: str | None = None
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self.token = uuid.uuid4().hex
        self.lost: str | None = None

    # ---- local ----------------------------------------------------------------------

    def _acquire_local(self) -> None:
        import fcntl

        folder = os.path.join(self.prefix, "_tfbatch")
        make_dirs(folder)
        path = os.path.join(folder, "lock")
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        except FileNotFoundError:  # make_dirs remembers folders per process: this one was deleted since
            os.makedirs(folder, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not self.wait:
                    holder = None
                    try:
                        holder = json.loads(os.pread(fd, 4096, 0) or b"null")
                    except ValueError:
                        pass
                    os.close(fd)
                    raise OutputLocked(_describe(self.prefix, holder)) from None
                self.sleep(self.poll_s)
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(_holder()).encode(), 0)
        self._fd = fd

    # ---- object stores --------------------------------------------------------------

    def _lease_body(self) -> bytes:
        return json.dumps({**_holder(), "token": self.token, "expires": time.time() + self.ttl_s}).encode()

    def _s3(self):
        fs, _ = get_fs(self.prefix)
        bucket, key = split_s3(join(self.prefix, "_tfbatch/lock.json"))
        return fs, bucket, key

    def _acquire_s3(self) -> None:
        fs, bucket, key = self._s3()
        while True:
            try:
                resp = retry(lambda: fs.call_s3("put_object", Bucket=bucket, Key=key, Body=self._lease_body(),
                                                IfNoneMatch="*"))
                self._etag = resp["ETag"]
                return
            except Exception as exc:
                if not _precondition_failed(exc):
                    raise
            holder, etag = self._read_lease(fs, bucket, key)
            if holder is not None and etag is not None and holder.get("expires", 0) < time.time():
                try:  # take over an expired lease, unless someone else just did
                    resp = retry(lambda: fs.call_s3("put_object", Bucket=bucket, Key=key,
                                                    Body=self._lease_body(), IfMatch=etag))
                    self._etag = resp["ETag"]
                    return
                except Exception as exc:
                    if not _precondition_failed(exc):
                        raise
            if not self.wait:
                raise OutputLocked(_describe(self.prefix, holder))
            self.sleep(self.poll_s)

    @staticmethod
    def _read_lease(fs, bucket: str, key: str) -> tuple[dict | None, str | None]:
        # ETag first, body second: if the lease changes in between, the If-Match on the
        # older ETag fails and the loop looks again, so a mismatch is never acted on.
        try:
            etag = retry(lambda: fs.call_s3("head_object", Bucket=bucket, Key=key))["ETag"]
            data = retry(lambda: fs.cat_file(f"{bucket}/{key}"))
        except FileNotFoundError:
            return None, None
        try:
            return json.loads(data), etag
        except ValueError:
            return None, etag

    def _renew_loop(self) -> None:
        fs, bucket, key = self._s3()
        while not self._stop.wait(self.ttl_s / 3):
            try:
                resp = retry(lambda: fs.call_s3("put_object", Bucket=bucket, Key=key, Body=self._lease_body(),
                                                IfMatch=self._etag))
                self._etag = resp["ETag"]
            except Exception as exc:  # lost the lease: say so; the job reports it
                self.lost = f"lease on '{self.prefix}' lost: {exc}"
                return

    # ---- both -----------------------------------------------------------------------

    def acquire(self) -> "OutputLock":
        if self.local:
            self._acquire_local()
        else:
            self._acquire_s3()
            self._renewer = threading.Thread(target=self._renew_loop, daemon=True, name="output-lease")
            self._renewer.start()
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # drops the flock; the file stays for the next job
            self._fd = None
        if self._etag is not None:
            self._stop.set()
            if self._renewer is not None:
                self._renewer.join()
            fs, bucket, key = self._s3()
            try:
                retry(lambda: fs.call_s3("delete_object", Bucket=bucket, Key=key))
            finally:
                self._etag = None

    def __enter__(self) -> "OutputLock":
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _precondition_failed(exc: BaseException) -> bool:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        response = getattr(current, "response", None)
        if isinstance(response, dict):
            code = str((response.get("Error") or {}).get("Code", ""))
            status = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
            if code in ("PreconditionFailed", "412", "ConditionalRequestConflict") or status in (412, 409):
                return True
        current = current.__cause__ or current.__context__
    return False
