"""AssembleWith: write one object's outputs, in input order, into a sink.

``None`` concatenates outputs byte for byte. ``Line`` ends every output with a newline.
SageMaker's documentation says Line "adds a newline character at the end of every
transformed record"; we add one only when the output does not already end with ``\\n``,
because a CSV/JSON Lines response that already ends with one would otherwise leave a blank
line after every record and line N of the output would stop answering record N.
"""

from __future__ import annotations

import json
from typing import BinaryIO

from tfbatch.errors import ConfigError, TfbatchError
from tfbatch.records.framing import Record

ASSEMBLE_WITH = ("None", "Line")


def normalize_assemble_with(assemble_with: str | None) -> str:
    if assemble_with is None or assemble_with == "None":
        return "None"
    if assemble_with.lower() == "line":
        return "Line"
    raise ConfigError(f"AssembleWith {assemble_with!r} is not supported: expected None or Line")


class Assembler:
    """Appends outputs to ``sink``; the caller feeds them in record order."""

    def __init__(self, assemble_with: str | None, sink: BinaryIO):
        self.assemble_with = normalize_assemble_with(assemble_with)
        self._line = self.assemble_with == "Line"
        self._sink = sink
        self.outputs = 0
        self.bytes_written = 0

    def add(self, output: bytes) -> None:
        write = self._sink.write
        write(output)
        n = len(output)
        if self._line and not output.endswith(b"\n"):
            write(b"\n")
            n += 1
        self.outputs += 1
        self.bytes_written += n

    def add_many(self, data: bytes, outputs: int) -> None:
        """``outputs`` outputs at once, already assembled (each ended as ``add`` ends it)."""
        self._sink.write(data)
        self.outputs += outputs
        self.bytes_written += len(data)

    def add_error(self, record: Record, error: BaseException | str) -> None:
        """A failed record's place in the output: one JSON line (see ``error_line``)."""
        self.add(error_line(record, error))


def error_line(record: Record, error: BaseException | str) -> bytes:
    """``{"error": ..., "record": index, "offset": offset}`` on one line, no trailing newline.

    With AssembleWith=Line it keeps line N of the output answering record N even when
    record N failed.
    """
    if isinstance(error, TfbatchError):
        message = error.message
    else:
        message = str(error)
    return json.dumps({"error": message, "record": record.index, "offset": record.offset}).encode()
