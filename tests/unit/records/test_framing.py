"""Splitters: round trips, exact framing facts, corruption and truncation, streaming."""

from __future__ import annotations

import io
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tfbatch.errors import ConfigError, RecordError
from tfbatch.records.crc32c import crc32c, masked_crc32c
from tfbatch.records.framing import RECORDIO_MAGIC, RECORDIO_MAGIC_BYTES, iter_records
from tfbatch.records.writers import (
    frame_record,
    frame_recordio,
    frame_tfrecord,
    write_lines,
    write_recordio,
    write_tfrecord,
)

MAGIC = RECORDIO_MAGIC_BYTES
SETTINGS = settings(max_examples=100, deadline=None)

# Byte strings that often contain the RecordIO magic (aligned or not) and newlines.
_atoms = st.sampled_from([MAGIC, b"\n", b"\r\n", b"\x00", b"\x0a\x23", b"\xd7\xce", b"x"])
payload = st.one_of(
    st.binary(max_size=64),
    st.lists(st.one_of(_atoms, st.binary(max_size=5)), max_size=12).map(b"".join),
)
payload_lists = st.lists(payload, max_size=12)
chunk_sizes = st.integers(min_value=1, max_value=40)

WRITERS = {"TFRecord": write_tfrecord, "RecordIO": write_recordio}


class _Reader(io.RawIOBase):
    """Any stream that is not a BytesIO: read in chunks of ``chunk_size`` (a file, gunzip, S3)."""

    def __init__(self, data: bytes):
        self._data, self._pos = data, 0

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        end = len(self._data) if n is None or n < 0 else self._pos + n
        out = self._data[self._pos:end]
        self._pos += len(out)
        return out


def _seen(records) -> list[tuple]:
    return [(r.index, r.offset, r.data, r.raw, None if r.error is None else str(r.error)) for r in records]


def records_of(data: bytes, split_type, **kw):
    """The records of ``data`` held whole (a BytesIO: split in place), checked to be exactly
    those of the same bytes read as a stream in chunks."""
    whole = list(iter_records(io.BytesIO(data), split_type, **kw))
    assert _seen(whole) == _seen(iter_records(_Reader(data), split_type, **kw))
    return whole


@pytest.mark.parametrize("split_type", ["TFRecord", "RecordIO", "Line"])
def test_a_bytesio_read_partly_splits_from_where_it_stands(split_type):
    recs = [b"first", b"second \x00 record", b"third"]
    blob = write_lines(recs) if split_type == "Line" else WRITERS[split_type](recs)
    head = b"HEADER"  # read by someone else before the splitter got the stream
    held, streamed = io.BytesIO(head + blob), _Reader(head + blob)
    held.read(len(head))
    streamed.read(len(head))
    got = _seen(iter_records(held, split_type, chunk_size=4))
    assert got == _seen(iter_records(streamed, split_type, chunk_size=4))
    assert [data for _, _, data, _, _ in got] == recs and got[0][1] == 0
    assert held.read() == b""  # the splitter owns the rest of the stream


def crc32c_python(data: bytes) -> int:
    """A bit-at-a-time CRC-32C (reflected Castagnoli polynomial): the oracle for the C one."""
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def test_crc32c_known_vector_and_fallback_agree():
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c_python(b"123456789") == 0xE3069283
    for sample in (b"", b"\x00" * 32, bytes(range(256))):
        assert crc32c(sample) == crc32c_python(sample)


@pytest.mark.parametrize("split_type", ["TFRecord", "RecordIO"])
@SETTINGS
@given(recs=payload_lists, chunk=chunk_sizes)
def test_binary_round_trip(split_type, recs, chunk):
    blob = WRITERS[split_type](recs)
    out = records_of(blob, split_type, chunk_size=chunk)
    assert [r.error for r in out] == [None] * len(recs)
    assert [r.data for r in out] == recs
    assert [r.index for r in out] == list(range(len(recs)))
    # raw is the exact framed bytes, so concatenating raw gives the object back
    assert b"".join(r.raw for r in out) == blob
    assert [r.raw_size for r in out] == [len(r.raw) for r in out]  # counted without building raw
    offsets = [0]
    for r in out[:-1]:
        offsets.append(offsets[-1] + len(r.raw))
    assert [r.offset for r in out] == offsets[: len(out)]


@pytest.mark.parametrize("split_type", ["TFRecord", "RecordIO"])
@SETTINGS
@given(recs=payload_lists)
def test_binary_round_trip_with_short_reads(split_type, recs, trickle):
    blob = WRITERS[split_type](recs)
    out = list(iter_records(trickle(blob, step=5), split_type, chunk_size=7))
    assert [r.data for r in out] == recs and not any(r.error for r in out)


line_payload = st.binary(max_size=30).map(lambda b: b.replace(b"\n", b"").rstrip(b"\r")).filter(bool)


@SETTINGS
@given(recs=st.lists(line_payload, max_size=12), chunk=chunk_sizes, crlf=st.booleans(), last_nl=st.booleans())
def test_line_round_trip(recs, chunk, crlf, last_nl):
    sep = b"\r\n" if crlf else b"\n"
    blob = sep.join(recs) + (sep if last_nl and recs else b"")
    out = records_of(blob, "Line", chunk_size=chunk)
    assert [r.data for r in out] == recs
    assert b"".join(r.raw for r in out) == blob
    assert all(r.raw.endswith(sep) for r in out[:-1])


def test_line_skips_empty_lines_but_keeps_true_offsets():
    blob = b"a\n\n\r\nbb\r\n\nc"
    out = records_of(blob, "Line", chunk_size=2)
    assert [(r.index, r.offset, r.data, r.raw) for r in out] == [
        (0, 0, b"a", b"a\n"),
        (1, 5, b"bb", b"bb\r\n"),
        (2, 10, b"c", b"c"),
    ]
    assert blob[out[1].offset : out[1].offset + 2] == b"bb"
    assert write_lines([b"x", b"y"]) == b"x\ny\n"


def test_none_split_is_one_record_and_empty_object_is_none():
    out = records_of(b"\x00abc\ndef", None, chunk_size=2)
    assert [(r.index, r.offset, r.data, r.raw) for r in out] == [(0, 0, b"\x00abc\ndef", b"\x00abc\ndef")]
    assert records_of(b"", "None") == []
    for split_type in ("Line", "RecordIO", "TFRecord"):
        assert records_of(b"", split_type) == []


def test_unknown_split_type_fails_at_call_time():
    with pytest.raises(ConfigError, match="SplitType 'Lines'"):
        iter_records(io.BytesIO(b""), "Lines")
    assert records_of(b"a\n", "line")[0].data == b"a"  # case-insensitive, like the API's enums


def test_tfrecord_layout_matches_the_spec():
    framed = frame_tfrecord(b"hello")
    length, length_crc = struct.unpack("<QI", framed[:12])
    assert length == 5 and length_crc == masked_crc32c(framed[:8])
    assert framed[12:17] == b"hello"
    assert struct.unpack("<I", framed[17:])[0] == masked_crc32c(b"hello")
    # masked = rotate right 15 + 0xa282ead8
    crc = crc32c(b"hello")
    assert masked_crc32c(b"hello") == ((((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF)


def _recordio_parts(blob: bytes):
    """(cflag, length) of every physical part, parsed independently of the splitter."""
    parts, pos = [], 0
    while pos < len(blob):
        magic, lrec = struct.unpack_from("<II", blob, pos)
        assert magic == RECORDIO_MAGIC
        length = lrec & ((1 << 29) - 1)
        parts.append((lrec >> 29, length))
        pos += 8 + ((length + 3) & ~3)
    return parts


def test_recordio_splits_at_aligned_magic_like_dmlc():
    data = b"abcd" + MAGIC + b"efgh" + MAGIC + b"ij"
    blob = frame_recordio(data)
    assert _recordio_parts(blob) == [(1, 4), (2, 4), (3, 2)]
    assert len(blob) % 4 == 0 and blob.endswith(b"ij\0\0")
    (rec,) = records_of(blob, "RecordIO")
    assert rec.data == data and rec.raw == blob
    # an unaligned magic is data, not a split point
    unaligned = b"ab" + MAGIC + b"cd"
    assert _recordio_parts(frame_recordio(unaligned)) == [(0, 8)]
    # magic at the very start and the very end: empty first / last parts
    edge = MAGIC + b"wxyz" + MAGIC
    assert _recordio_parts(frame_recordio(edge)) == [(1, 0), (2, 4), (3, 0)]
    assert records_of(frame_recordio(edge), "RecordIO")[0].data == edge


def test_frame_record_per_split_type():
    assert frame_record(b"ab", None) == b"ab"
    assert frame_record(b"ab", "Line") == b"ab\n"
    assert frame_record(b"ab", "TFRecord") == frame_tfrecord(b"ab")
    assert frame_record(b"ab", "RecordIO") == frame_recordio(b"ab")


# ---- corruption ---------------------------------------------------------------


def test_tfrecord_bad_data_crc_is_isolated_and_named():
    recs = [b"a" * 10, b"b" * 20, b"c" * 30]
    blob = bytearray(write_tfrecord(recs))
    second = len(frame_tfrecord(recs[0]))
    blob[second + 12 + 3] ^= 0x01
    out = records_of(bytes(blob), "TFRecord", source="s3://b/x.tfrecord")
    assert [r.error is None for r in out] == [True, False, True]
    assert out[2].data == recs[2]
    msg = str(out[1].error)
    assert isinstance(out[1].error, RecordError)
    assert msg.startswith(f"s3://b/x.tfrecord record 1 at byte {second}: data CRC32C mismatch (expected 0x")
    assert "computed 0x" in msg


def test_tfrecord_bad_length_crc_stops():
    recs = [b"a" * 10, b"b" * 20, b"c" * 30]
    blob = bytearray(write_tfrecord(recs))
    second = len(frame_tfrecord(recs[0]))
    blob[second + 1] ^= 0x40
    out = records_of(bytes(blob), "TFRecord", source="x")
    assert len(out) == 2 and out[0].data == recs[0]
    assert f"x record 1 at byte {second}: length CRC32C mismatch" in str(out[1].error)


def test_recordio_bad_magic_and_bad_cflag_stop():
    recs = [b"abc", b"defgh"]
    blob = bytearray(write_recordio(recs))
    second = len(frame_recordio(recs[0]))
    bad = bytes(blob[:second]) + b"\xff" + bytes(blob[second + 1 :])
    out = records_of(bad, "RecordIO", source="r.rec")
    assert out[0].data == b"abc" and len(out) == 2
    assert str(out[1].error).startswith(f"r.rec record 1 at byte {second}: bad RecordIO magic number")
    assert "expected 0xced7230a" in str(out[1].error)
    # a continuation part (cflag 2) where a record must start
    cont = struct.pack("<II", RECORDIO_MAGIC, (2 << 29) | 4) + b"abcd"
    (err,) = records_of(cont, "RecordIO")
    assert "unexpected RecordIO cflag 2" in str(err.error)
    # a start part followed by a fresh record instead of a continuation
    start = struct.pack("<II", RECORDIO_MAGIC, (1 << 29) | 4) + b"abcd"
    (err,) = records_of(start + frame_recordio(b"zz"), "RecordIO")
    assert "unexpected RecordIO cflag 0" in str(err.error)


@SETTINGS
@given(recs=st.lists(payload, min_size=1, max_size=8), data=st.data())
def test_tfrecord_any_flipped_byte_is_detected_never_misread(recs, data):
    blob = bytearray(write_tfrecord(recs))
    pos = data.draw(st.integers(0, len(blob) - 1))
    blob[pos] ^= data.draw(st.integers(1, 255))
    out = records_of(bytes(blob), "TFRecord", chunk_size=data.draw(chunk_sizes))
    errors = [r for r in out if r.error is not None]
    assert len(errors) == 1
    assert [r.index for r in out] == list(range(len(out)))
    for r in out:
        if r.error is None:
            assert r.data == recs[r.index]


@pytest.mark.parametrize("split_type", ["TFRecord", "RecordIO", "Line"])
@SETTINGS
@given(recs=st.lists(payload, min_size=1, max_size=8), data=st.data())
def test_flipped_byte_never_raises(split_type, recs, data):
    blob = bytearray(write_lines([r.replace(b"\n", b"") for r in recs]) if split_type == "Line" else WRITERS[split_type](recs))
    if not blob:
        return
    pos = data.draw(st.integers(0, len(blob) - 1))
    blob[pos] ^= data.draw(st.integers(1, 255))
    out = records_of(bytes(blob), split_type, chunk_size=data.draw(chunk_sizes))
    assert [r.index for r in out] == list(range(len(out)))
    for r in out[:-1]:  # only data-CRC errors may be followed by more records
        assert r.error is None or "data CRC32C" in str(r.error)


@pytest.mark.parametrize("split_type", ["TFRecord", "RecordIO"])
@SETTINGS
@given(recs=st.lists(payload, min_size=1, max_size=8), data=st.data())
def test_truncation(split_type, recs, data):
    framer = frame_tfrecord if split_type == "TFRecord" else frame_recordio
    frames = [framer(r) for r in recs]
    blob = b"".join(frames)
    cut = data.draw(st.integers(0, len(blob) - 1))
    out = records_of(blob[:cut], split_type, chunk_size=data.draw(chunk_sizes))
    boundaries = [0]
    for f in frames:
        boundaries.append(boundaries[-1] + len(f))
    whole = sum(1 for b in boundaries[1:] if b <= cut)
    assert [r.data for r in out[:whole]] == recs[:whole]
    assert all(r.error is None for r in out[:whole])
    if cut in boundaries:
        assert len(out) == whole
    else:
        assert len(out) == whole + 1
        assert isinstance(out[-1].error, RecordError)
        assert f"record {whole} at byte {boundaries[whole]}" in str(out[-1].error)
        assert "truncated" in str(out[-1].error)


def test_streaming_reads_bounded(trickle):
    recs = [bytes([i % 251]) * 1000 for i in range(500)]
    blob = write_tfrecord(recs)
    stream = trickle(blob, step=1 << 30)
    it = iter_records(stream, "TFRecord", chunk_size=4096)
    first = next(it)
    assert first.data == recs[0]
    assert stream.given <= 4096 + 1016 * 2
    assert sum(1 for _ in it) == 499

    lines = b"".join(b"%d\n" % i for i in range(100_000))
    stream = trickle(lines, step=1 << 30)
    it = iter_records(stream, "Line", chunk_size=4096)
    assert next(it).data == b"0"
    assert stream.given <= 4096


def test_stream_record_error_becomes_last_record():
    class Broken(io.RawIOBase):
        def __init__(self):
            self.calls = 0

        def readable(self):
            return True

        def read(self, n=-1):
            self.calls += 1
            if self.calls == 1:
                return b"a\nb\nc"
            raise RecordError("src.gz: corrupt gzip data")

    out = list(iter_records(Broken(), "Line", source="src.gz", chunk_size=5))
    assert [r.data for r in out[:2]] == [b"a", b"b"]
    assert str(out[2].error) == "src.gz record 2 at byte 4: corrupt gzip data"


def test_other_stream_errors_propagate():
    class Down(io.RawIOBase):
        def readable(self):
            return True

        def read(self, n=-1):
            raise OSError("connection reset")

    with pytest.raises(OSError):
        list(iter_records(Down(), "TFRecord"))
