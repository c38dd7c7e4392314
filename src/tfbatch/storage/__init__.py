"""Storage: URIs, listing (S3Prefix / ManifestFile), atomic writes and retries.

Local paths, ``file://``, ``s3://`` (endpoint and credentials from the standard AWS
environment variables, e.g. ``AWS_ENDPOINT_URL``), ``memory://`` and any other fsspec
protocol.
"""

from tfbatch.storage.io import (
    ObjectNotFound,
    atomic_write,
    delete,
    exists,
    open_read,
    read_bytes,
    read_text,
    write_text,
)
from tfbatch.storage.listing import ObjectRef, iter_pages, list_manifest, list_prefix, read_manifest
from tfbatch.storage.backoff import is_transient, retry
from tfbatch.storage.uri import get_fs, is_local, join, normalize, protocol_of, relative_key

__all__ = [
    "ObjectNotFound",
    "ObjectRef",
    "atomic_write",
    "delete",
    "exists",
    "get_fs",
    "is_local",
    "is_transient",
    "iter_pages",
    "join",
    "list_manifest",
    "list_prefix",
    "normalize",
    "open_read",
    "protocol_of",
    "read_bytes",
    "read_manifest",
    "read_text",
    "relative_key",
    "retry",
    "write_text",
]
