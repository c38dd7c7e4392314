"""Storage URIs: one spelling per location, and the filesystem that serves it.

Local paths (plain or ``file://``) normalise to absolute paths, so an ``ObjectRef.uri`` can be
handed straight to ``open()``; everything else (``s3://``, ``memory://``, any protocol
fsspec knows) keeps its URI form. Filesystem instances are cached per process: an s3fs
instance owns an aiohttp session bound to an event loop thread that does not survive
``fork``, so a forked worker must build its own rather than inherit the parent's.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from tfbatch.errors import DependencyMissing, InvalidInput

LOCAL = "file"
_S3_PROTOCOLS = ("s3", "s3a", "s3n")

_cache: dict[tuple[Any, ...], Any] = {}
_cache_pid = os.getpid()
_cache_lock = threading.Lock()


def protocol_of(uri: str) -> str:
    """``"file"`` for local paths, else the scheme (``s3a``/``s3n`` count as ``s3``)."""
    if "://" not in uri:
        return LOCAL
    scheme = uri.split("://", 1)[0].lower()
    if scheme in _S3_PROTOCOLS:
        return "s3"
    return scheme or LOCAL


def is_local(uri: str) -> bool:
    return protocol_of(uri) == LOCAL


def normalize(uri: str) -> str:
    """Canonical spelling: absolute local path, ``s3://bucket/key``, or the URI unchanged.

    A trailing '/' is kept: it is what marks a prefix as a folder.
    """
    if not uri:
        raise InvalidInput("storage URI is empty: expected a local path or a URI such as s3://bucket/prefix")
    if uri[0] == "/" and "//" not in uri and "/." not in uri and "://" not in uri:
        # Already what the local branch returns (absolute, no empty, "." or ".." segments, no
        # "~"): the spelling of every key a job lists and every output it writes, twice per
        # object, so skip abspath's walk of it.
        return uri
    proto = protocol_of(uri)
    if proto == LOCAL:
        path = uri[len("file://"):] if uri.lower().startswith("file://") else uri
        trailing = path.endswith("/") and len(path) > 1
        path = os.path.abspath(os.path.expanduser(path))
        return path + "/" if trailing and not path.endswith("/") else path
    if proto == "s3":
        rest = uri.split("://", 1)[1]
        if not rest or rest.startswith("/"):
            raise InvalidInput(f"storage URI '{uri}': expected s3://bucket/key, got no bucket name")
        return "s3://" + rest
    return uri


def dirname_prefix(uri: str) -> str:
    """The folder part of a prefix: everything up to and including its last '/'."""
    scheme, sep, rest = uri.rpartition("://")
    head = rest[: rest.rfind("/") + 1] if "/" in rest else ""
    if sep and not head:
        # "s3://bucket" names the whole bucket: its folder part is "s3://bucket/".
        return f"{scheme}{sep}{rest}/"
    return f"{scheme}{sep}{head}"


def join(prefix: str, key: str) -> str:
    """``prefix`` + '/' + ``key``, refusing keys that would climb out of the prefix.

    Output names are built from input keys, so a key such as ``../x`` must not become a path
    outside the output prefix.
    """
    key = key.replace("\\", "/") if is_local(prefix) else key
    if key.startswith("/") or any(part == ".." for part in key.split("/")):
        raise InvalidInput(f"object key '{key}': expected a relative key without '..' segments")
    if not key:
        return prefix
    return prefix + key if prefix.endswith("/") else f"{prefix}/{key}"


def relative_key(prefix: str, uri: str) -> str:
    """The key of ``uri`` relative to the folder part of ``prefix`` ('/' separated).

    ``s3://b/data/`` and ``s3://b/data/img`` both give ``data/img1.jpg`` the key
    ``img1.jpg``; a prefix naming one object gives that object its file name as key.
    """
    prefix_n, uri_n = normalize(prefix), normalize(uri)
    if not uri_n.startswith(prefix_n):
        raise InvalidInput(f"object '{uri}' is not under prefix '{prefix}'")
    return uri_n[len(dirname_prefix(prefix_n)):]


def _cache_key(proto: str) -> tuple[Any, ...]:
    if proto != "s3":
        return (proto,)
    from tfbatch.storage.s3options import cache_key

    return (proto, cache_key())


def _reset_after_fork() -> None:
    global _cache_lock
    _cache.clear()
    _cache_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)


def _new_filesystem(proto: str) -> Any:
    import fsspec

    if proto == "s3":
        try:
            import s3fs  # noqa: F401 - only to give the install hint
        except ImportError as exc:
            raise DependencyMissing("s3:// URIs need s3fs: pip install 'tfbatch[s3]'") from exc
        from tfbatch.storage.s3options import new_s3_filesystem

        return new_s3_filesystem()
    try:
        return fsspec.filesystem(proto)
    except (ImportError, ValueError) as exc:
        raise DependencyMissing(f"no filesystem for protocol '{proto}://': {exc}") from exc


def filesystem(proto: str) -> Any:
    """The process's shared fsspec filesystem for ``proto`` (rebuilt after a fork)."""
    global _cache_pid
    key = _cache_key(proto)
    with _cache_lock:
        if _cache_pid != os.getpid():  # covers fork paths that skipped the at-fork hook
            _cache.clear()
            _cache_pid = os.getpid()
        fs = _cache.get(key)
        if fs is None:
            fs = _cache[key] = _new_filesystem(proto)
        return fs


def get_fs(uri: str) -> tuple[Any, str]:
    """``(fs, path)``: the filesystem for ``uri`` and the path that filesystem understands."""
    uri = normalize(uri)
    proto = protocol_of(uri)
    fs = filesystem(proto)
    if proto == LOCAL:
        return fs, uri
    if proto == "s3":
        return fs, uri.split("://", 1)[1]
    return fs, fs._strip_protocol(uri)


def split_s3(uri: str) -> tuple[str, str]:
    """``s3://bucket/some/key`` -> ``("bucket", "some/key")``."""
    uri = normalize(uri)
    if protocol_of(uri) != "s3":
        raise InvalidInput(f"'{uri}': expected an s3:// URI")
    bucket, _, key = uri.split("://", 1)[1].partition("/")
    return bucket, key


def clear_cache() -> None:
    """Drop cached filesystems (tests that switch endpoints call this)."""
    with _cache_lock:
        _cache.clear()
