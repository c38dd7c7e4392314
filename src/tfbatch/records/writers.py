"""Writers: the inverse of the splitters, for tests, benchmarks and dataset generation."""

from __future__ import annotations

import struct
from typing import Iterable

from tfbatch.errors import InvalidInput
from tfbatch.records.crc32c import masked_crc32c
from tfbatch.records.framing import (
    _RECORDIO_HEADER,
    _RECORDIO_LEN_MASK,
    _U32,
    RECORDIO_MAGIC,
    RECORDIO_MAGIC_BYTES,
    normalize_split_type,
)



def frame_tfrecord(data: bytes) -> bytes:
    length = struct.pack("<Q", len(data))
    return b"".join(
        (length, _U32.pack(masked_crc32c(length)), data, _U32.pack(masked_crc32c(data)))
    )


def frame_recordio(data: bytes) -> bytes:
    """dmlc's framing: the payload is split at every 4-byte-aligned magic number."""
    n = len(data)
    if n > _RECORDIO_LEN_MASK:
        raise InvalidInput(f"RecordIO records must be smaller than 2**29 bytes, got {n}")
    out: list[bytes] = []
    dptr = 0
    i = data.find(RECORDIO_MAGIC_BYTES)
    while i >= 0:
        if i % 4:
            i = data.find(RECORDIO_MAGIC_BYTES, i + 1)
            continue
        cflag = 1 if dptr == 0 else 2
        out.append(_RECORDIO_HEADER.pack(RECORDIO_MAGIC, (cflag << 29) | (i - dptr)))
        out.append(data[dptr:i])
        dptr = i + 4
        i = data.find(RECORDIO_MAGIC_BYTES, dptr)
    out.append(_RECORDIO_HEADER.pack(RECORDIO_MAGIC, ((3 if dptr else 0) << 29) | (n - dptr)))
    out.append(data[dptr:])
    out.append(b"\0" * (-n % 4))
    return b"".join(out)


def frame_line(data: bytes) -> bytes:
    if b"\n" in data:
        raise InvalidInput("a Line record cannot contain a newline byte")
    return data + b"\n"


def frame_record(data: bytes, split_type: str | None) -> bytes:
    kind = normalize_split_type(split_type)
    if kind is None:
        return bytes(data)
    return _FRAMERS[kind](data)


_FRAMERS = {"Line": frame_line, "RecordIO": frame_recordio, "TFRecord": frame_tfrecord}


def write_tfrecord(records: Iterable[bytes]) -> bytes:
    return b"".join(frame_tfrecord(r) for r in records)


def write_recordio(records: Iterable[bytes]) -> bytes:
    return b"".join(frame_recordio(r) for r in records)


def write_lines(records: Iterable[bytes]) -> bytes:
    return b"".join(frame_line(r) for r in records)
