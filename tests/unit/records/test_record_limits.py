"""Record limits: an oversize record fails by name, holds no memory, and splitting goes on."""

from __future__ import annotations

import gzip
import io
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tfbatch.errors import ConfigError, PayloadTooLarge
from tfbatch.records import open_input
from tfbatch.records.crc32c import masked_crc32c
from tfbatch.records.framing import RECORDIO_MAGIC, RecordLimit, iter_records
from tfbatch.records.writers import write_lines, write_recordio, write_tfrecord

LIMIT = RecordLimit(10, "MaxPayloadInMB=test")
WRITERS = {"Line": write_lines, "TFRecord": write_tfrecord, "RecordIO": write_recordio}


class _CountingStream(io.BytesIO):
    """Remembers the largest block a splitter held from one read, to prove nothing was buffered."""

    def __init__(self, data: bytes):
        super().__init__(data)
        self.largest = 0

    def read(self, n: int = -1) -> bytes:
        assert n is not None and n >= 0, "a splitter must never read an object whole"
        out = super().read(n)
        self.largest = max(self.largest, len(out))
        return out


def split(data: bytes, kind, chunk: int = 7, limit: RecordLimit = LIMIT):
    return list(iter_records(io.BytesIO(data), kind, source="in/obj", chunk_size=chunk, limit=limit))


@pytest.mark.parametrize("kind", ["Line", "TFRecord", "RecordIO"])
@pytest.mark.parametrize("chunk", [1, 5, 64, 1 << 20])
def test_oversize_record_is_named_and_its_neighbours_survive(kind, chunk):
    data = WRITERS[kind]([b"first", b"x" * 11, b"exactly10!", b"y" * 300, b"last"])
    records = split(data, kind, chunk)
    assert [r.data for r in records] == [b"first", b"", b"exactly10!", b"", b"last"]
    assert [r.index for r in records] == [0, 1, 2, 3, 4]
    for bad in (records[1], records[3]):
        assert isinstance(bad.error, PayloadTooLarge)
        msg = str(bad.error)
        assert msg.startswith(f"in/obj record {bad.index} at byte {bad.offset}:")
        assert "10 bytes (MaxPayloadInMB=test)" in msg
        assert bad.raw == b""
    # offsets stay the true byte positions, as without a limit
    unlimited = list(iter_records(io.BytesIO(data), kind))
    assert [r.offset for r in records] == [r.offset for r in unlimited]


def test_split_none_stops_reading_at_the_limit():
    stream = _CountingStream(b"z" * 10_000)
    (record,) = iter_records(stream, None, source="big.bin", chunk_size=4, limit=LIMIT)
    assert isinstance(record.error, PayloadTooLarge)
    assert "big.bin record 0 at byte 0" in str(record.error)
    assert stream.tell() <= 12  # read one chunk past the limit, not the object
    assert split(b"z" * 10, None)[0].data == b"z" * 10


def test_line_without_newline_in_a_gzip_bomb_is_streamed():
    # 8 MiB of zeros without a newline, 8 KiB on disk; the record limit is 10 bytes.
    member = gzip.compress(b"\0" * (1 << 20))
    stream = _CountingStream(b"".join([gzip.compress(b"ok\n")] + [member] * 8))
    gz = open_input(stream, "Gzip", source="bomb.gz")
    records = list(iter_records(gz, "Line", source="bomb.gz", chunk_size=1 << 16, limit=LIMIT))
    assert records[0].data == b"ok"
    assert isinstance(records[1].error, PayloadTooLarge)
    assert "bomb.gz record 1 at byte 3: last line of 8388608 bytes" in str(records[1].error)
    assert len(records) == 2


def _tfrecord_header(length: int) -> bytes:
    head = struct.pack("<Q", length)
    return head + struct.pack("<I", masked_crc32c(head))


def test_tfrecord_length_2_to_the_40_is_refused_without_allocating():
    stream = _CountingStream(write_tfrecord([b"good"]) + _tfrecord_header(1 << 40) + b"\0" * 5000)
    records = list(iter_records(stream, "TFRecord", source="t.tfrecord", chunk_size=256, limit=LIMIT))
    assert records[0].data == b"good"
    msg = str(records[1].error)
    assert "t.tfrecord record 1 at byte 20: TFRecord of 1099511627776 bytes" in msg
    assert "truncated: the object ends 5000 bytes into it" in msg
    assert stream.largest <= 256
    assert len(records) == 2


def _recordio_part(cflag: int, body: bytes) -> bytes:
    return struct.pack("<II", RECORDIO_MAGIC, (cflag << 29) | len(body)) + body + b"\0" * (-len(body) % 4)


def test_recordio_multipart_record_that_never_ends():
    parts = [_recordio_part(1, b"a" * 8)] + [_recordio_part(2, b"b" * 8)] * 500
    stream = _CountingStream(write_recordio([b"fine"]) + b"".join(parts))
    records = list(iter_records(stream, "RecordIO", source="r.rec", chunk_size=64, limit=LIMIT))
    assert records[0].data == b"fine"
    assert isinstance(records[1].error, PayloadTooLarge)
    assert "r.rec record 1 at byte 12: RecordIO record of more than" in str(records[1].error)
    assert stream.largest <= 64
    assert len(records) == 2


def test_recordio_multipart_over_the_limit_then_a_good_record():
    big = _recordio_part(1, b"a" * 8) + _recordio_part(2, b"b" * 8) + _recordio_part(3, b"c")
    records = split(big + write_recordio([b"after"]), "RecordIO")
    assert "RecordIO record of 25 bytes" in str(records[0].error)  # 8 + 4 + 8 + 4 + 1 (magic re-inserted)
    assert records[1].data == b"after" and records[1].error is None


def test_limit_must_be_positive():
    with pytest.raises(ConfigError):
        iter_records(io.BytesIO(b""), "Line", limit=RecordLimit(0))


@settings(max_examples=150, deadline=None)
@given(
    kind=st.sampled_from(["Line", "TFRecord", "RecordIO"]),
    sizes=st.lists(st.integers(min_value=1, max_value=40), max_size=10),
    limit=st.integers(min_value=1, max_value=30),
    chunk=st.integers(min_value=1, max_value=50),
)
def test_every_record_is_either_whole_or_named_too_large(kind, sizes, limit, chunk):
    payloads = [bytes([65 + i % 26]) * n for i, n in enumerate(sizes)]
    records = split(WRITERS[kind](payloads), kind, chunk, RecordLimit(limit, "cap"))
    assert len(records) == len(payloads)
    for record, payload in zip(records, payloads):
        if len(payload) > limit:
            assert isinstance(record.error, PayloadTooLarge) and record.data == b""
        else:
            assert record.error is None and record.data == payload
