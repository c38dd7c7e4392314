"""CompressionType: streaming gunzip, clear errors for data that is not gzip."""

from __future__ import annotations

import gzip
import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tfbatch.errors import ConfigError, RecordError
from tfbatch.records import iter_records, open_input, write_recordio


def test_none_passes_through():
    stream = io.BytesIO(b"abc")
    assert open_input(stream, None) is stream
    assert open_input(stream, "None") is stream


def test_unknown_compression_is_a_job_spec_error():
    with pytest.raises(ConfigError, match="CompressionType 'Zstd'.*None or Gzip"):
        open_input(io.BytesIO(b""), "Zstd")


@settings(max_examples=50, deadline=None)
@given(recs=st.lists(st.binary(max_size=40), max_size=10), members=st.integers(1, 3))
def test_gzip_round_trip_including_multi_member(recs, members):
    blob = write_recordio(recs)
    cut = [len(blob) * i // members for i in range(members + 1)]
    gz = b"".join(gzip.compress(blob[a:b]) for a, b in zip(cut, cut[1:]))
    out = list(iter_records(open_input(io.BytesIO(gz), "Gzip"), "RecordIO", chunk_size=16))
    assert [r.data for r in out] == recs and not any(r.error for r in out)


def test_gzip_streams_without_reading_everything():
    lines = b"".join(b"line %d\n" % i for i in range(200_000))
    raw = io.BytesIO(gzip.compress(lines))
    it = iter_records(open_input(raw, "Gzip"), "Line", chunk_size=1024)
    assert next(it).data == b"line 0"
    assert raw.tell() < len(raw.getvalue())  # compressed input not consumed all at once


def test_not_gzip_is_a_record_error_naming_the_object():
    stream = open_input(io.BytesIO(b"plain text\n"), "Gzip", source="s3://b/in.csv")
    with pytest.raises(RecordError, match=r"s3://b/in.csv: not gzip data, but CompressionType is Gzip"):
        stream.read(10)
    out = list(iter_records(open_input(io.BytesIO(b"plain\n"), "Gzip", source="in.csv"), "Line", source="in.csv"))
    assert len(out) == 1
    assert str(out[0].error).startswith("in.csv record 0 at byte 0: not gzip data")


def test_truncated_and_corrupt_gzip_become_error_records():
    data = b"".join(b"%d\n" % i for i in range(50_000))
    gz = gzip.compress(data)
    out = list(iter_records(open_input(io.BytesIO(gz[: len(gz) // 2]), "Gzip"), "Line", chunk_size=4096))
    assert out[-1].error is not None and "truncated gzip" in str(out[-1].error)
    good = [r for r in out if r.error is None]
    assert good and [r.data for r in good] == [b"%d" % i for i in range(len(good))]

    bad = bytearray(gz)
    bad[len(bad) // 2] ^= 0xFF
    out = list(iter_records(open_input(io.BytesIO(bytes(bad)), "Gzip"), "Line", chunk_size=4096))
    assert out[-1].error is not None and "gzip" in str(out[-1].error)
