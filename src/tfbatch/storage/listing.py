"""Input listing: every object under an S3Prefix, or the objects a ManifestFile names.

Listing streams: a prefix with 100,000 objects yields its first object after one
ListObjectsV2 page, so planning and reading start while the rest is still being listed.
Keys come out in S3's order (lexicographic by key) on every backend, which keeps
partitioning by key deterministic.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import NamedTuple

from tfbatch.errors import ConfigError
from tfbatch.storage.io import ObjectNotFound, read_bytes
from tfbatch.storage.local_walk import walk_local
from tfbatch.storage.backoff import retry
from tfbatch.storage.uri import LOCAL, dirname_prefix, get_fs, join, normalize, protocol_of, split_s3

DEFAULT_PAGE_SIZE = 1000  # S3's own maximum for ListObjectsV2


class ObjectRef(NamedTuple):
    """One input object. ``key`` is relative to the listed prefix and names its output.

    A named tuple rather than a frozen dataclass: a 10M-object listing makes 10M of these,
    and a tuple is built about three times faster (no ``object.__setattr__`` per field).
    """

    uri: str
    key: str
    size: int | None = None


def list_prefix(
    prefix_uri: str, *, page_size: int = DEFAULT_PAGE_SIZE, follow_symlinks: bool = False
) -> Iterator[ObjectRef]:
    """Every object whose location starts with ``prefix_uri``, in key order, streamed.

    S3 and other remote stores: a plain string prefix, so ``s3://b/data/img`` matches
    ``data/img1.jpg`` and ``data/img/a.jpg``. Keys are relative to the prefix's folder part
    (``img1.jpg``, ``img/a.jpg``); on S3, a prefix that matches only the folder ``img/`` is
    that folder (keys ``a.jpg``), as SageMaker names outputs. Local paths: an existing folder lists everything below
    it (keys relative to it); anything else is a file-name prefix within its parent folder.
    Keys ending in '/' (folder markers made by consoles) are skipped. Local symbolic links
    follow the policy of :mod:`tfbatch.storage.local_walk` (folder links only with
    ``follow_symlinks``).
    """
    if page_size < 1:
        raise ValueError(f"page_size: expected >= 1, got {page_size}")
    prefix_uri = normalize(prefix_uri)
    proto = protocol_of(prefix_uri)
    if proto == "s3":
        for page in _s3_pages(prefix_uri, page_size):
            yield from page
    elif proto == LOCAL:
        yield from _local_walk(prefix_uri, follow_symlinks)
    else:
        yield from _fsspec_walk(prefix_uri)


def iter_pages(prefix_uri: str, *, page_size: int = DEFAULT_PAGE_SIZE) -> Iterator[list[ObjectRef]]:
    """``list_prefix`` in lists of up to ``page_size`` (one ListObjectsV2 call each on S3)."""
    if page_size < 1:
        raise ValueError(f"page_size: expected >= 1, got {page_size}")
    prefix_uri = normalize(prefix_uri)
    if protocol_of(prefix_uri) == "s3":
        yield from _s3_pages(prefix_uri, page_size)
        return
    page: list[ObjectRef] = []
    for ref in list_prefix(prefix_uri):
        page.append(ref)
        if len(page) >= page_size:
            yield page
            page = []
    if page:
        yield page


def _names_only_a_folder(prefix_uri: str) -> bool:
    """Whether ``s3://b/data/jpg`` (no trailing '/') matches nothing but the folder ``jpg/``.

    Then it is listed as that folder, with keys relative to it, as an existing local folder
    is, and as SageMaker names a job's outputs: the seed-000 notebook reads
    ``{output_path}/<id>.jpg.out`` for its input prefix ``.../open-images/jpg``. A prefix that
    also matches other names (``img1.jpg`` beside ``img/``) stays a name prefix. One
    delimited ListObjectsV2 call of at most two entries decides."""
    bucket, key_prefix = split_s3(prefix_uri)
    if not key_prefix or key_prefix.endswith("/"):
        return False
    fs, _ = get_fs(prefix_uri)
    try:
        resp = retry(lambda: fs.call_s3("list_objects_v2", Bucket=bucket, Prefix=key_prefix, Delimiter="/",
                                        MaxKeys=2))
    except FileNotFoundError:
        return False  # the listing itself reports the missing bucket
    folders = [p.get("Prefix") for p in resp.get("CommonPrefixes", [])]
    return not resp.get("Contents") and folders == [key_prefix + "/"] and not resp.get("IsTruncated")


def _s3_pages(prefix_uri: str, page_size: int) -> Iterator[list[ObjectRef]]:
    if _names_only_a_folder(prefix_uri):
        prefix_uri += "/"
    fs, _ = get_fs(prefix_uri)
    bucket, key_prefix = split_s3(prefix_uri)
    folder = dirname_prefix(prefix_uri)
    strip = len(folder) - len(f"s3://{bucket}/")
    token: str | None = None
    while True:
        kwargs = {"Bucket": bucket, "Prefix": key_prefix, "MaxKeys": page_size}
        if token:
            kwargs["ContinuationToken"] = token
        try:
            resp = retry(lambda: fs.call_s3("list_objects_v2", **kwargs))
        except FileNotFoundError as exc:
            raise ObjectNotFound(f"bucket '{bucket}' of prefix '{prefix_uri}' does not exist") from exc
        # S3 already returns keys in order; sorting again costs little and makes other
        # S3-compatible servers behave the same.
        contents = sorted(resp.get("Contents", []), key=lambda o: o["Key"])
        page = [
            ObjectRef(uri=f"s3://{bucket}/{o['Key']}", key=o["Key"][strip:], size=o.get("Size"))
            for o in contents
            if not o["Key"].endswith("/")
        ]
        if page:
            yield page
        token = resp.get("NextContinuationToken")
        if not resp.get("IsTruncated") or not token:
            return


def _local_walk(prefix: str, follow_symlinks: bool) -> Iterator[ObjectRef]:
    for uri, key, size in walk_local(prefix, follow_symlinks=follow_symlinks):
        yield ObjectRef(uri=uri, key=key, size=size)


def _fsspec_walk(prefix_uri: str) -> Iterator[ObjectRef]:
    # Other remote stores (gcs, az, memory) are object stores too: same string-prefix rule
    # as S3. Their listing is not paginated here; fsspec's find() returns it whole.
    fs, path = get_fs(prefix_uri)
    if prefix_uri.endswith("/") and not path.endswith("/"):
        path += "/"  # fsspec strips it, but here it means "this folder, not a name prefix"
    folder_uri = dirname_prefix(prefix_uri)
    base, _, name_prefix = path.rpartition("/")
    if not base or not fs.isdir(base):
        return
    found = fs.find(base, detail=True)
    base_len = len(base.rstrip("/")) + 1
    for name in sorted(found):
        info = found[name]
        key = name[base_len:]
        if info.get("type") != "file" or not key.startswith(name_prefix) or key.endswith("/"):
            continue
        yield ObjectRef(uri=folder_uri + key, key=key, size=info.get("size"))


def read_manifest(uri: str) -> tuple[str, list[str]]:
    """Parse a ManifestFile: ``[{"prefix": "s3://b/p/"}, "key1", "sub/key2", ...]``.

    Returns ``(prefix, keys)``. Keys are joined to the prefix with '/' when the prefix does
    not end with one. Raises ConfigError naming what was expected.
    """
    where = f"manifest '{uri}'"
    shape = '[{"prefix": "s3://bucket/p/"}, "key", ...]'
    try:
        raw = read_bytes(uri)
    except ObjectNotFound as exc:
        raise ConfigError(f"{where}: file does not exist") from exc
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{where}: expected a JSON array like {shape}, got invalid JSON: {exc}") from exc
    if not isinstance(doc, list):
        raise ConfigError(f"{where}: expected a JSON array like {shape}, got {type(doc).__name__}")
    if not doc:
        raise ConfigError(f'{where}: expected a first element {{"prefix": "..."}}, got an empty array')
    head = doc[0]
    if not isinstance(head, dict) or not isinstance(head.get("prefix"), str) or not head["prefix"]:
        raise ConfigError(
            f'{where}: expected the first element to be {{"prefix": "s3://bucket/p/"}}, got {json.dumps(head)[:200]}'
        )
    prefix = head["prefix"]
    keys: list[str] = []
    seen: set[str] = set()
    for index, key in enumerate(doc[1:], start=1):
        if not isinstance(key, str) or not key:
            got = json.dumps(key)[:200]
            raise ConfigError(f"{where}: element {index}: expected a non-empty key string, got {got}")
        if key.startswith("/") or ".." in key.split("/") or key.endswith("/"):
            raise ConfigError(
                f"{where}: element {index}: expected an object key relative to the prefix "
                f"(no leading '/', no '..', not a folder), got '{key}'"
            )
        if key in seen:
            raise ConfigError(
                f"{where}: element {index}: key '{key}' is listed twice; each object may appear once"
            )
        seen.add(key)
        keys.append(key)
    return prefix, keys


def list_manifest(uri: str) -> Iterator[ObjectRef]:
    """The objects a ManifestFile names, in manifest order; sizes are not looked up."""
    prefix, keys = read_manifest(uri)
    for key in keys:
        yield ObjectRef(uri=normalize(join(prefix, key)), key=key, size=None)
