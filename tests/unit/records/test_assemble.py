"""AssembleWith: None concatenates, Line keeps line N answering record N."""

from __future__ import annotations

import io
import json

import pytest

from tfbatch.errors import ConfigError, RecordError
from tfbatch.records import Assembler, Record, error_line


def test_none_concatenates_bytes_as_they_are():
    sink = io.BytesIO()
    a = Assembler("None", sink)
    for out in (b"\x00\x01", b"ab\n", b""):
        a.add(out)
    assert sink.getvalue() == b"\x00\x01ab\n"
    assert a.outputs == 3 and a.bytes_written == 5


def test_line_adds_one_newline_only_when_missing():
    sink = io.BytesIO()
    a = Assembler("Line", sink)
    for out in (b'{"predictions": [1]}', b"0.5\n", b""):
        a.add(out)
    assert sink.getvalue() == b'{"predictions": [1]}\n0.5\n\n'
    assert a.bytes_written == len(sink.getvalue())


def test_error_line_keeps_positions():
    sink = io.BytesIO()
    a = Assembler("Line", sink)
    r1 = Record(1, 17, b"", b"", RecordError('x record 1 at byte 17: data CRC32C "mismatch"\nsecond line'))
    a.add(b"ok0")
    a.add_error(r1, r1.error)
    a.add(b"ok2")
    lines = sink.getvalue().split(b"\n")
    assert lines[0] == b"ok0" and lines[2] == b"ok2" and lines[3] == b""
    assert json.loads(lines[1]) == {
        "error": 'x record 1 at byte 17: data CRC32C "mismatch"\nsecond line',
        "record": 1,
        "offset": 17,
    }
    assert b"\n" not in error_line(r1, ValueError("a\nb"))


def test_unknown_assemble_with():
    with pytest.raises(ConfigError, match="AssembleWith 'Lines'"):
        Assembler("Lines", io.BytesIO())
