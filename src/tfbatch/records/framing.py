"""Split one (decompressed) input object into records: None, Line, RecordIO, TFRecord.

Splitters stream: they read the object in chunks and hold at most one record plus one
chunk, so a multi-GB TFRecord shard costs no more memory than its largest record. An
object already in memory (a ``BytesIO``: the dataflow holds objects up to its cap whole)
is framed in place, with no chunk copied.

Corruption never escapes as an exception. A record whose framing is intact but whose
payload is damaged (TFRecord data CRC) comes back with ``error`` set and splitting goes
on; damage to the framing itself (length CRC, RecordIO magic, truncation) cannot be
resynchronised, so one error record is yielded and the iterator ends.

Empty lines (``\\n`` or ``\\r\\n`` alone) are not records: SageMaker's documentation
says nothing on them and an empty request body is never useful to a model, so they are
skipped; ``Record.index`` counts records yielded, ``Record.offset`` keeps the true byte
position. An empty object yields no records for every split type.

With ``max_record_bytes`` set, a record whose payload grows past it is never held whole:
the splitter stops keeping its bytes the moment the limit is passed, reads (and drops)
the rest of it, and yields one error record naming the object, the record and the limit.
Memory therefore stays at one chunk plus the limit whatever the object or gzip bomb
inflates to. Line, TFRecord and RecordIO then resume at the next record; with split type
None the record is the whole object, so reading stops there.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass
from typing import BinaryIO, Iterator

from tfbatch.errors import ConfigError, PayloadTooLarge, RecordError, TfbatchError
from tfbatch.records.crc32c import masked_crc32c

SPLIT_TYPES = (None, "Line", "RecordIO", "TFRecord")
DEFAULT_CHUNK = 1 << 20
# Bounds a single read() so a corrupt-but-CRC-valid length cannot make us allocate it.
_MAX_READ = 64 << 20

RECORDIO_MAGIC = 0xCED7230A
RECORDIO_MAGIC_BYTES = struct.pack("<I", RECORDIO_MAGIC)
_RECORDIO_LEN_MASK = (1 << 29) - 1
_TFRECORD_HEADER = struct.Struct("<QI")
_U32 = struct.Struct("<I")
_RECORDIO_HEADER = struct.Struct("<II")


class Record:
    """One record of an input object.

    ``offset`` is the byte position of the record's framing in the decompressed object,
    ``data`` the payload with framing stripped, ``raw`` the bytes exactly as framed in the
    object (what MultiRecord payloads concatenate). With ``error`` set, data/raw hold
    whatever could be recovered (possibly b"").

    A record made by ``Record.framed`` (TFRecord, RecordIO) keeps its framing apart and puts
    ``raw`` together only when asked, which only MultiRecord payloads do: a SingleRecord job's
    records are copied out of the object once, not twice (``profile/record-copies.md``).

    Treated as immutable but not frozen: a frozen dataclass sets each field through
    ``object.__setattr__``, 0.62 us a record against 0.16 us, on every line of a line job.
    """

    __slots__ = ("index", "offset", "data", "error", "_raw", "_around")

    def __init__(self, index: int, offset: int, data: bytes, raw: bytes,
                 error: TfbatchError | None = None) -> None:
        self.index, self.offset, self.data, self.error = index, offset, data, error
        self._raw: bytes | None = raw
        self._around: tuple[bytes, bytes] = (b"", b"")

    @classmethod
    def framed(cls, index: int, offset: int, head: bytes, data: bytes, tail: bytes,
               error: TfbatchError | None = None) -> Record:
        """The record whose bytes in the object are ``head + data + tail``."""
        record = cls(index, offset, data, None, error)  # type: ignore[arg-type]
        record._around = (head, tail)
        return record

    @property
    def raw(self) -> bytes:
        raw = self._raw
        if raw is None:
            head, tail = self._around
            return b"".join((head, self.data, tail))
        return raw

    @property
    def raw_size(self) -> int:
        """``len(self.raw)``, without putting it together."""
        if self._raw is None:
            head, tail = self._around
            return len(head) + len(self.data) + len(tail)
        return len(self._raw)

    def __eq__(self, other: object) -> bool:
        if type(other) is not Record:
            return NotImplemented
        return (self.index, self.offset, self.data, self.raw, self.error) == (
            other.index, other.offset, other.data, other.raw, other.error)

    __hash__ = None  # type: ignore[assignment] - mutable, compared by value

    def __repr__(self) -> str:
        return (f"Record(index={self.index!r}, offset={self.offset!r}, data={self.data!r}, "
                f"raw={self.raw!r}, error={self.error!r})")


@dataclass(frozen=True, slots=True)
class RecordLimit:
    """The largest record payload a splitter will hold, and the setting that fixed it."""

    max_bytes: int
    setting: str = "max_record_bytes"

    def error(self, source: str, index: int, offset: int, what: str) -> PayloadTooLarge:
        return PayloadTooLarge(
            f"{where(source, index, offset)}: {what} exceeds the record limit of {self.max_bytes} "
            f"bytes ({self.setting}); the record was skipped without being held in memory"
        )


_NO_LIMIT = RecordLimit(1 << 62, "no limit")


def normalize_split_type(split_type: str | None) -> str | None:
    if split_type is None or split_type == "None":
        return None
    for known in SPLIT_TYPES[1:]:
        if split_type.lower() == known.lower():
            return known
    raise ConfigError(
        f"SplitType {split_type!r} is not supported: expected one of None, Line, RecordIO, TFRecord"
    )


def where(source: str, index: int, offset: int) -> str:
    """The prefix every record error message starts with."""
    prefix = f"{source} " if source else ""
    return f"{prefix}record {index} at byte {offset}"


class _Cursor:
    """Where the splitter is, so a stream failure can be reported at the right record."""

    __slots__ = ("index", "offset")

    def __init__(self) -> None:
        self.index = 0
        self.offset = 0


class _ChunkedSource:
    """Buffered exact-size reads over any object with ``read(n)``."""

    __slots__ = ("_stream", "_chunk", "_buf", "_pos", "offset")

    def __init__(self, stream: BinaryIO, chunk_size: int):
        self._stream = stream
        self._chunk = chunk_size
        self._buf = b""
        self._pos = 0
        self.offset = 0  # absolute offset of the next unread byte
        if type(stream) is io.BytesIO:
            # An object held whole (the dataflow reads most objects so): its bytes as they
            # are, from where the stream stands, and the stream left at its end. CPython's
            # BytesIO shares the bytes it was made from, so nothing is copied; a chunk read
            # and joined per megabyte had been a tenth of a TFRecord job's GIL time.
            self._pos = stream.tell()
            self._buf = stream.getvalue()
            stream.seek(len(self._buf))

    def _fill(self, n: int) -> None:
        have = len(self._buf) - self._pos
        if have >= n:
            return
        pieces = [self._buf[self._pos :]] if have else []
        while have < n:
            data = self._stream.read(max(self._chunk, min(n - have, _MAX_READ)))
            if not data:
                break
            pieces.append(data)
            have += len(data)
        self._buf = b"".join(pieces)
        self._pos = 0

    def peek(self, n: int) -> bytes:
        self._fill(n)
        return self._buf[self._pos : self._pos + n]

    def take(self, n: int) -> bytes:
        self._fill(n)
        out = self._buf[self._pos : self._pos + n]
        self._pos += len(out)
        self.offset += len(out)
        return out

    def skip(self, n: int) -> int:
        """Drop the next ``n`` bytes, holding at most one chunk; returns how many there were."""
        have = len(self._buf) - self._pos
        if have >= n:
            self._pos += n
            self.offset += n
            return n
        self._buf, self._pos = b"", 0
        done = have
        while done < n:
            data = self._stream.read(min(self._chunk, n - done))
            if not data:
                break
            done += len(data)
        self.offset += done
        return done


def _iter_whole(
    stream: BinaryIO, source: str, chunk: int, cur: _Cursor, limit: RecordLimit
) -> Iterator[Record]:
    pieces = []
    size = 0
    while True:
        data = stream.read(chunk)
        if not data:
            break
        size += len(data)
        if size > limit.max_bytes:
            # The object is the record: nothing after this point could be used, so stop reading.
            what = f"the object (split type None, more than {size} bytes read)"
            yield Record(0, 0, b"", b"", limit.error(source, 0, 0, what))
            return
        pieces.append(data)
    body = b"".join(pieces)
    if body:
        yield Record(0, 0, body, body)


def _iter_lines(
    stream: BinaryIO, source: str, chunk: int, cur: _Cursor, limit: RecordLimit
) -> Iterator[Record]:
    pending: list[bytes] = []  # pieces of a line that spans chunk boundaries
    pending_len = 0
    # Past this many bytes a line cannot fit under the limit even after "\r\n" is stripped.
    keep_max = limit.max_bytes + 2
    skipping = False  # the current line passed the limit: count its bytes, keep none
    offset = 0  # absolute offset of the current line's first byte
    index = 0
    while True:
        cur.index, cur.offset = index, offset
        block = stream.read(chunk)
        if not block:
            break
        pos = 0
        find = block.find
        while True:
            nl = find(b"\n", pos)
            if nl < 0:
                if pos < len(block):
                    pending_len += len(block) - pos
                    if skipping or pending_len > keep_max:
                        skipping = True
                        pending.clear()
                    else:
                        pending.append(block[pos:])
                break
            if skipping or pending_len + nl + 1 - pos > keep_max:
                length = pending_len + nl + 1 - pos
                pending.clear()
                pending_len, skipping, pos = 0, False, nl + 1
                what = f"line of {length} bytes"
                yield Record(index, offset, b"", b"", limit.error(source, index, offset, what))
                index += 1
                offset += length
                cur.index, cur.offset = index, offset
                continue
            raw = block[pos : nl + 1]
            if pending:
                pending.append(raw)
                raw = b"".join(pending)
                pending.clear()
            pending_len = 0
            pos = nl + 1
            end = -2 if raw.endswith(b"\r\n") else -1
            if len(raw) + end > limit.max_bytes:
                what = f"line of {len(raw)} bytes"
                yield Record(index, offset, b"", b"", limit.error(source, index, offset, what))
                index += 1
            elif len(raw) + end > 0:
                yield Record(index, offset, raw[:end], raw)
                index += 1
            offset += len(raw)
            cur.index, cur.offset = index, offset
    if skipping:
        what = f"last line of {pending_len} bytes (no newline before the end of the object)"
        yield Record(index, offset, b"", b"", limit.error(source, index, offset, what))
    elif pending:
        raw = b"".join(pending)
        data = raw[:-1] if raw.endswith(b"\r") else raw
        if len(data) > limit.max_bytes:
            what = f"last line of {len(data)} bytes"
            yield Record(index, offset, b"", b"", limit.error(source, index, offset, what))
        elif data:
            yield Record(index, offset, data, raw)


def _iter_tfrecord(
    stream: BinaryIO, source: str, chunk: int, cur: _Cursor, limit: RecordLimit
) -> Iterator[Record]:
    src = _ChunkedSource(stream, chunk)
    index = 0
    while True:
        offset = src.offset
        cur.index, cur.offset = index, offset
        header = src.peek(12)
        if not header:
            return
        at = where(source, index, offset)
        if len(header) < 12:
            msg = f"{at}: truncated TFRecord header (expected 12 bytes, got {len(header)})"
            yield Record(index, offset, b"", header, RecordError(msg))
            return
        length, stored = _TFRECORD_HEADER.unpack(header)
        computed = masked_crc32c(header[:8])
        if computed != stored:
            msg = (
                f"{at}: length CRC32C mismatch (expected 0x{stored:08x}, computed "
                f"0x{computed:08x}); the rest of the object cannot be framed"
            )
            yield Record(index, offset, b"", header, RecordError(msg))
            return
        if length > limit.max_bytes:
            # The length field is CRC-checked, so the framing can be trusted past the record.
            skipped = src.skip(16 + length)
            what = f"TFRecord of {length} bytes"
            if skipped < 16 + length:
                what += f" (truncated: the object ends {skipped - 12} bytes into it)"
            yield Record(index, offset, b"", b"", limit.error(source, index, offset, what))
            if skipped < 16 + length:
                return
            index += 1
            continue
        src.skip(12)  # the header, peeked above
        data = src.take(length)  # the one copy a record costs (its framing is kept apart)
        footer = src.take(4)
        if len(data) < length or len(footer) < 4:
            msg = (
                f"{at}: truncated TFRecord (expected {length} data bytes and a 4-byte CRC, "
                f"got {len(data) + len(footer)} bytes before the end of the object)"
            )
            yield Record.framed(index, offset, header, data, footer, RecordError(msg))
            return
        (stored,) = _U32.unpack(footer)
        computed = masked_crc32c(data)
        if computed != stored:
            msg = (
                f"{at}: data CRC32C mismatch (expected 0x{stored:08x}, computed 0x{computed:08x})"
            )
            yield Record.framed(index, offset, header, data, footer, RecordError(msg))
        else:
            yield Record.framed(index, offset, header, data, footer)
        index += 1


def _iter_recordio(
    stream: BinaryIO, source: str, chunk: int, cur: _Cursor, limit: RecordLimit
) -> Iterator[Record]:
    src = _ChunkedSource(stream, chunk)
    index = 0
    while True:
        offset = src.offset
        cur.index, cur.offset = index, offset
        header = src.take(8)
        if not header:
            return
        at = where(source, index, offset)
        parts: list[bytes] = []
        raws: list[bytes] = []
        first = True
        size = 0  # payload bytes of this record so far, counted even once they are dropped
        too_large = False
        while True:
            part_at = src.offset - len(header)
            if too_large and len(header) < 8:
                what = f"RecordIO record of more than {size} bytes, cut off at byte {part_at}"
                yield Record(index, offset, b"", b"", limit.error(source, index, offset, what))
                return
            if len(header) < 8:
                if not header:
                    what = "truncated: a multi-part record ends before its last part (cflag 3)"
                else:
                    what = (
                        f"truncated RecordIO header at byte {part_at} "
                        f"(expected 8 bytes, got {len(header)})"
                    )
                yield _recordio_error(index, offset, parts, raws, header, f"{at}: {what}")
                return
            magic, lrec = _RECORDIO_HEADER.unpack(header)
            if magic != RECORDIO_MAGIC:
                msg = (
                    f"{at}: bad RecordIO magic number at byte {part_at} (expected "
                    f"0x{RECORDIO_MAGIC:08x}, got 0x{magic:08x}); the rest of the object "
                    "cannot be framed"
                )
                yield _recordio_error(index, offset, parts, raws, header, msg)
                return
            length, cflag = lrec & _RECORDIO_LEN_MASK, lrec >> 29
            if (cflag not in (0, 1)) if first else (cflag not in (2, 3)):
                expected = "0 or 1 (start of a record)" if first else "2 or 3 (continuation)"
                msg = (
                    f"{at}: unexpected RecordIO cflag {cflag} at byte {part_at} "
                    f"(expected {expected})"
                )
                yield _recordio_error(index, offset, parts, raws, header, msg)
                return
            padded = (length + 3) & ~3
            size += length + (0 if first else 4)
            if too_large or size > limit.max_bytes:
                # A multi-part record may go on forever: drop parts as they come.
                too_large = True
                parts.clear()
                raws.clear()
                if src.skip(padded) < padded:
                    what = f"RecordIO record of more than {size} bytes, cut off at byte {src.offset}"
                    yield Record(index, offset, b"", b"", limit.error(source, index, offset, what))
                    return
                if cflag in (0, 3):
                    what = f"RecordIO record of {size} bytes"
                    yield Record(index, offset, b"", b"", limit.error(source, index, offset, what))
                    break
                header = src.take(8)
                first = False
                continue
            if first and cflag == 0:  # a record in one part: copied out once, framing kept apart
                data = src.take(length)
                pad = src.take(padded - length) if padded != length else b""
                if len(data) + len(pad) < padded:
                    msg = _recordio_truncated(at, padded, part_at, len(data) + len(pad))
                    yield Record.framed(index, offset, header, data, pad, RecordError(msg))
                    return
                yield Record.framed(index, offset, header, data, pad)
                break
            body = src.take(padded)
            raws.append(header)
            raws.append(body)
            if len(body) < padded:
                msg = _recordio_truncated(at, padded, part_at, len(body))
                parts.append(body[:length])
                yield _recordio_error(index, offset, parts, raws, b"", msg)
                return
            parts.append(body if padded == length else body[:length])
            if cflag in (0, 3):
                break
            # dmlc removed a magic number at each split point: put it back.
            parts.append(RECORDIO_MAGIC_BYTES)
            header = src.take(8)
            first = False
        if too_large or not raws:  # dropped, or a one-part record already yielded
            index += 1
            continue
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        raw = b"".join(raws)
        yield Record(index, offset, data, raw)
        index += 1


def _recordio_truncated(at: str, padded: int, part_at: int, got: int) -> str:
    return f"{at}: truncated RecordIO record (expected {padded} bytes after the header at byte {part_at}, got {got})"


def _recordio_error(
    index: int, offset: int, parts: list[bytes], raws: list[bytes], tail: bytes, msg: str
) -> Record:
    return Record(index, offset, b"".join(parts), b"".join(raws) + tail, RecordError(msg))


_SPLITTERS = {
    None: _iter_whole,
    "Line": _iter_lines,
    "RecordIO": _iter_recordio,
    "TFRecord": _iter_tfrecord,
}


def iter_records(
    stream: BinaryIO,
    split_type: str | None,
    *,
    source: str = "",
    chunk_size: int = DEFAULT_CHUNK,
    limit: RecordLimit | None = None,
) -> Iterator[Record]:
    """Records of one object, in order. Raises ConfigError at once for an unknown split type.

    ``limit`` caps one record's payload (see the module docstring); None means no cap, for
    callers that trust their input (tests, dataset tools).
    """
    kind = normalize_split_type(split_type)
    if limit is not None and limit.max_bytes < 1:
        raise ConfigError(f"a record limit must be at least 1 byte, got {limit.max_bytes}")
    return _guarded(_SPLITTERS[kind], stream, source, chunk_size, limit or _NO_LIMIT)


def _guarded(splitter, stream: BinaryIO, source: str, chunk: int, limit: RecordLimit) -> Iterator[Record]:
    # A RecordError raised by the stream itself (e.g. corrupt gzip) becomes the last record,
    # so callers see one failure mode for every kind of damage.
    cur = _Cursor()
    try:
        yield from splitter(stream, source, chunk, cur, limit)
    except RecordError as exc:
        at = where(source, cur.index, cur.offset)
        what = str(exc)
        if source and what.startswith(f"{source}: "):
            what = what[len(source) + 2 :]
        yield Record(cur.index, cur.offset, b"", b"", RecordError(f"{at}: {what}"))
