"""Gzip bombs through the real splitters in a child process: peak memory stays flat.

Each object is ~0.5 MB on disk and inflates to 512 MiB; before record limits every one
of them cost at least 512 MiB of resident memory. The child reports its peak RSS after
imports and after splitting, so the bound is on the splitting alone.
"""

from __future__ import annotations

import gzip
import json
import struct
import subprocess
import sys

import pytest

from tfbatch.records.crc32c import masked_crc32c
from tfbatch.records.framing import RECORDIO_MAGIC

INFLATED_MIB = 512
LIMIT_MIB = 6  # MaxPayloadInMB's default
# Splitting may hold the limit a few times over (pieces + joined record) and one chunk;
# 512 MiB objects would need far more than this to be buffered whole.
MAX_GROWTH_MIB = 96

_CHILD = r"""
import json, resource, sys
from tfbatch.records import RecordLimit, iter_records, open_input

path, kind, limit_mib = sys.argv[1], sys.argv[2], int(sys.argv[3])
kind = None if kind == "None" else kind
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
out = []
with open(path, "rb") as f:
    stream = open_input(f, "Gzip", source=path)
    for r in iter_records(stream, kind, source=path, limit=RecordLimit(limit_mib << 20, "MaxPayloadInMB=6")):
        out.append({"index": r.index, "offset": r.offset, "size": len(r.data),
                    "error": None if r.error is None else [type(r.error).__name__, str(r.error)]})
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"records": out, "before_kib": before, "after_kib": after}))
"""

_ZEROS_MIB = None


def _zeros_member() -> bytes:
    global _ZEROS_MIB
    if _ZEROS_MIB is None:
        _ZEROS_MIB = gzip.compress(b"\0" * (1 << 20), compresslevel=9)
    return _ZEROS_MIB


def _recordio_continuations_mib() -> bytes:
    part = struct.pack("<II", RECORDIO_MAGIC, (2 << 29) | (65536 - 8)) + b"\0" * (65536 - 8)
    return gzip.compress(part * 16, compresslevel=9)


def _bomb(kind: str) -> bytes:
    """A multi-member gzip: a small head, then 1 MiB members repeated (gzip readers chain them)."""
    if kind in ("None", "Line"):
        head = b""
        body = _zeros_member()
    elif kind == "TFRecord":
        length = struct.pack("<Q", 1 << 40)
        head = length + struct.pack("<I", masked_crc32c(length))
        body = _zeros_member()
    else:
        head = struct.pack("<II", RECORDIO_MAGIC, (1 << 29) | 8) + b"\0" * 8
        body = _recordio_continuations_mib()
    return gzip.compress(head) + body * INFLATED_MIB


@pytest.mark.parametrize("kind", ["None", "Line", "TFRecord", "RecordIO"])
def test_gzip_bomb_fails_by_name_with_flat_memory(tmp_path, kind):
    path = tmp_path / f"bomb-{kind}.gz"
    path.write_bytes(_bomb(kind))
    assert path.stat().st_size < 2 << 20  # small on disk
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path), kind, str(LIMIT_MIB)],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    (record,) = result["records"]
    name, message = record["error"]
    assert name == "PayloadTooLarge"
    assert message.startswith(f"{path} record 0 at byte 0:")
    assert f"record limit of {LIMIT_MIB << 20} bytes (MaxPayloadInMB=6)" in message
    growth_mib = (result["after_kib"] - result["before_kib"]) / 1024
    assert growth_mib < MAX_GROWTH_MIB, f"{kind}: peak RSS grew by {growth_mib:.0f} MiB splitting one object"
